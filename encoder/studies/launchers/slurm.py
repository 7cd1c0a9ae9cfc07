"""The SLURM launcher: a study is one job array, a single run is one job of N JAX processes.

    python -m encoder ablate ... --launcher=slurm --slurm_partition=gpu --slurm_time=4:00:00
    python -m encoder run ... --launcher=slurm --slurm_tasks=8 --slurm_nodes=2

Array task i runs run i (`--array=0-(n-1)%parallel` caps how many run at once);
each task is `srun python -m encoder run --config=WORKDIR/job_config.py`, whose
srun tasks are the run's JAX processes (jax.distributed finds them through
SLURM's environment: distributed.coordinator_address=auto when a run has more
than one). The batch script writes the job's exit status into the run's
exit.json, so the study reads it from the shared file system like any
launcher's.

Preemption: the job asks for SIGTERM `signal_seconds` before its time limit
(`--signal=TERM@s`); the trainer checkpoints at the next step and exits 75;
the script then requeues the job (`scontrol requeue`), which resumes from the
newest checkpoint. (SLURM holds a requeued job for two minutes; a waiting
launcher makes its own requeued jobs eligible at once.) A job the scheduler kills or requeues itself (preemption, a
node failure: `--requeue`) resumes the same way.

Every run's submission is recorded in its WORKDIR/launch.json (the job id), so
a study started again after its launcher was killed waits for the runs still
queued or running instead of submitting them twice.
"""
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from typing import NamedTuple

from encoder.studies import records, runner

LAUNCH = "launch.json"
STOPPED = records.STOPPED
REQUEUE_ATTEMPTS = 5   # scontrol requeue tries before a stopped run is left to its owner
REQUEUE_PAUSE_S = 3
RELEASE_GRACE_S = 10.0  # a requeued job is made eligible this long after it is seen pending
clock = time.monotonic


class Queued(NamedTuple):
    """One array task (or plain job) in squeue: its state and how often it restarted."""
    state: str
    restarts: int


@dataclasses.dataclass
class Slurm:
    partition: str = ""
    account: str = ""
    qos: str = ""
    time: str = ""                 # the time limit, e.g. 4:00:00
    nodes: int = 1
    tasks: int = 1                 # JAX processes per run (srun tasks)
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    mem: str = ""                  # e.g. 32G
    sbatch: tuple = ()             # extra #SBATCH lines, e.g. ("--constraint=a100",)
    setup: str = ""                # e.g. "module load cuda; source venv/bin/activate"
    signal_seconds: int = 120      # SIGTERM this long before the time limit (0: none)
    parallel: int = 0              # array tasks at once (0: no cap)
    job_name: str = "encoder"
    detach: bool = False           # submit and return; the records tell the rest later
    dry_run: bool = False          # print the scripts, submit nothing
    poll_seconds: float = 2.0
    python: str = sys.executable
    env: dict | None = None        # the environment sbatch and squeue see
    folder: str = ""               # where scripts and SLURM's own logs go ("": the first
    #                                run's parent folder/slurm)

    detached = property(lambda self: self.detach or self.dry_run)

    # ------------------------------------------------------------------ scripts

    def header(self, job_name: str, output: str, array: str = "") -> list[str]:
        """The #SBATCH lines."""
        opts = [f"--job-name={job_name}", f"--output={output}", f"--nodes={self.nodes}",
                f"--ntasks={self.tasks}", "--requeue", "--open-mode=append"]
        for name, value in (("partition", self.partition), ("account", self.account),
                            ("qos", self.qos), ("time", self.time), ("mem", self.mem)):
            if value:
                opts.append(f"--{name}={value}")
        if self.gpus_per_node:
            opts.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.cpus_per_task:
            opts.append(f"--cpus-per-task={self.cpus_per_task}")
        if self.signal_seconds:
            opts.append(f"--signal=TERM@{self.signal_seconds}")
        if array:
            opts.append(f"--array={array}")
        opts += [s if s.startswith("--") else f"--{s}" for s in self.sbatch]
        return [f"#SBATCH {o}" for o in opts]

    def job_lines(self, words: list[str], d: str, job_ref: str) -> list[str]:
        """Runs the job under srun, records its exit status; a stop by the preemption
        signal (exit 75) requeues the job instead (it resumes from its checkpoint).
        words: `encoder run`'s flags and d: the workdir, both already shell words."""
        multi = ["--config.distributed.coordinator_address=auto"] if self.tasks > 1 else []
        cmd = " ".join(["srun", "--kill-on-bad-exit=1", shlex.quote(self.python), "-m",
                        "encoder", "run", *words, *multi])
        return [
            f"mkdir -p {d}",
            f'echo "$(date +%s.%N) start of job $SLURM_JOB_ID on $(hostname)'
            f' (restart ${{SLURM_RESTART_COUNT:-0}})" >> {d}/run.log',
            "rc=0",
            f"{cmd} >> {d}/run.log 2>&1 || rc=$?",
            f"if [ $rc -eq {STOPPED} ]; then",
            f'  echo "$(date +%s.%N) stopped by a signal: requeueing {job_ref}" >> {d}/run.log',
            # a busy controller can refuse or time out one request: try again before giving
            # up, and keep its answer in the run's log (SLURM's own output file is elsewhere)
            f"  for attempt in {' '.join(str(i) for i in range(1, REQUEUE_ATTEMPTS + 1))}; do",
            f"    scontrol requeue {job_ref} 2>> {d}/run.log && exit 0",
            f"    sleep {REQUEUE_PAUSE_S}",
            "  done",
            f'  echo "$(date +%s.%N) requeue of {job_ref} failed {REQUEUE_ATTEMPTS} times: the'
            f' run stays stopped at its checkpoint; submit the same command again to resume"'
            f" >> {d}/run.log",
            "fi",
            f"printf '{{\"rc\": %d, \"host\": \"%s\", \"time\": %s, \"launcher\": "
            f"\"slurm\", \"job\": \"%s\"}}' $rc \"$(hostname)\" \"$(date +%s)\" "
            f"\"{job_ref}\" > {d}/exit.json.tmp && mv {d}/exit.json.tmp {d}/exit.json",
            "exit $rc"]

    def preamble(self, cwd: str = runner.REPO) -> list[str]:
        lines = ["set -u", f"cd {shlex.quote(cwd)}",
                 f"export PYTHONPATH={shlex.quote(runner.REPO)}${{PYTHONPATH:+:$PYTHONPATH}}"]
        return lines + ([self.setup] if self.setup else [])

    def array_script(self, runs: list, output: str) -> str:
        """One array task per run; task i is runs[i]."""
        cap = f"%{self.parallel}" if self.parallel else ""
        lines = ["#!/bin/bash"] + self.header(self.job_name, output,
                                               f"0-{len(runs) - 1}{cap}")
        lines += self.preamble() + ['case "$SLURM_ARRAY_TASK_ID" in']
        lines += [f"  {i}) WORKDIR={shlex.quote(r.workdir)} ;;" for i, r in enumerate(runs)]
        lines += ['  *) echo "no run for array task $SLURM_ARRAY_TASK_ID"; exit 2 ;;', "esac"]
        lines += self.job_lines(['--config="$WORKDIR"/job_config.py', '--workdir="$WORKDIR"'],
                                '"$WORKDIR"', "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}")
        return "\n".join(lines) + "\n"

    def single_script(self, args: list[str], workdir: str, output: str) -> str:
        """One run (`encoder run`'s own flags) as one job of `tasks` JAX processes."""
        # the flags' relative paths mean what they meant where the command was typed
        lines = ["#!/bin/bash"] + self.header(self.job_name, output) + self.preamble(os.getcwd())
        return "\n".join(lines + self.job_lines([shlex.quote(a) for a in args],
                                                 shlex.quote(workdir), "$SLURM_JOB_ID")) + "\n"

    # --------------------------------------------------------------- scheduler

    def _env(self) -> dict:
        return dict(os.environ if self.env is None else self.env)

    def submit(self, script_path: str) -> str:
        """sbatch the script; returns the job id."""
        out = subprocess.run(["sbatch", "--parsable", script_path], capture_output=True,
                             text=True, env=self._env(), timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"sbatch {script_path} failed: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def queued(self, job: str) -> dict | None:
        """{array task id (or '' for a plain job): Queued(state, restarts)} of the job's
        tasks still in the queue (pending, running, requeued); None when squeue cannot
        answer."""
        out = subprocess.run(["squeue", "-h", "-r", "-j", job, "-O",
                              "ArrayTaskID:24,State:24,RestartCnt:12"],
                             capture_output=True, text=True, env=self._env(), timeout=60)
        if out.returncode != 0:
            if "Invalid job id" in out.stderr:
                return {}
            return None
        tasks = {}
        for line in out.stdout.split("\n"):
            words = line.split()
            if len(words) == 3:
                key, state, restarts = words
                tasks["" if key in ("N/A", "4294967294") else key] = Queued(
                    state, int(restarts) if restarts.isdigit() else 0)
        return tasks

    def wait_queued(self, job: str, attempts: int = 5) -> dict:
        for _ in range(attempts):
            tasks = self.queued(job)
            if tasks is not None:
                return tasks
            time.sleep(self.poll_seconds)
        raise RuntimeError(f"squeue does not answer for job {job}")

    # ------------------------------------------------------------- the study

    def _folder(self, runs: list) -> str:
        folder = self.folder or os.path.join(os.path.dirname(os.path.commonpath(
            [r.workdir for r in runs])), "slurm")
        os.makedirs(folder, exist_ok=True)
        return folder

    def in_flight(self, run) -> str | None:
        """The job (JOBID or JOBID_TASK) this run was submitted as, while it is queued."""
        try:
            with open(os.path.join(run.workdir, LAUNCH)) as f:
                launch = json.load(f)
        except (OSError, ValueError):
            return None
        if launch.get("launcher") != "slurm":
            return None
        tasks = self.queued(launch["job"])
        index = str(launch.get("index", ""))
        return f"{launch['job']}_{index}" if tasks and index in tasks else None

    def run(self, runs: list, on_exit, log=print) -> None:
        folder = self._folder(runs)
        waiting = {}  # run name -> (job id, array index)
        new = []
        for run in runs:
            ref = None if self.dry_run else self.in_flight(run)
            if ref:
                job, _, index = ref.partition("_")
                waiting[run.name] = (run, job, index)
                log(f"{run.name} is already queued as job {ref}: waiting for it")
            else:
                new.append(run)
        if new:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            script = self.array_script(new, os.path.join(folder, "%A_%a.out"))
            path = os.path.join(folder, f"array-{stamp}.sbatch")
            with open(path, "w") as f:
                f.write(script)
            if self.dry_run:
                log(f"# {path} (dry run: not submitted)\n{script}")
                return
            job = self.submit(path)
            t = time.time()
            for i, run in enumerate(new):
                with open(os.path.join(run.workdir, LAUNCH), "w") as f:
                    json.dump({"launcher": "slurm", "job": job, "index": i, "script": path,
                               "submitted": t}, f)
                waiting[run.name] = (run, job, str(i))
            log(f"submitted job array {job} ({len(new)} runs{', at most %d at once' % self.parallel if self.parallel else ''}): {path}")
            for i, run in enumerate(new):
                log(f"started {run.name} (array task {job}_{i})")
        if self.detach:
            log("detached: the runs go on in SLURM; start the same command again to wait "
                "for them and write the report")
            return
        self.wait(waiting, on_exit)

    def release_requeued(self, job: str, tasks: dict, released: dict) -> None:
        """A pending task that has restarted (RestartCnt > 0) was requeued: SLURM holds a
        requeued job for two minutes (its EligibleTime is the requeue + 121 s in 22.05);
        make it eligible now, once per restart, so a preempted run resumes as soon as a
        node is free. released: {job ref: the restart count released, and (ref, restarts):
        when that restart was first seen pending}, kept across polls. (Read from the
        restart count, not from a RUNNING -> PENDING transition seen between two polls: a
        job requeued seconds after it started is missed that way.)

        Not at once, though: RELEASE_GRACE_S after it is first seen pending. A job made
        eligible in the second its requeue revoked the old instance's credential (the old
        batch script still exiting) is started and killed at once by slurmd, "Killing
        non-startable batch JobId=2: Job credential revoked", and ends FAILED (a CI failure,
        read in slurmctld.log)."""
        now = clock()
        for index, task in tasks.items():
            ref = f"{job}_{index}" if index else job
            if task.state != "PENDING" or not task.restarts:
                continue
            if released.get(ref) == task.restarts:
                continue
            first = released.setdefault((ref, task.restarts), now)
            if now - first < RELEASE_GRACE_S:
                continue
            out = subprocess.run(["scontrol", "update", f"JobId={ref}", "StartTime=now"],
                                 capture_output=True, env=self._env(), timeout=60)
            if out.returncode == 0:
                released[ref] = task.restarts

    def wait(self, waiting: dict, on_exit) -> None:
        """Polls squeue until every run's task has left the queue; on_exit as each does."""
        released: dict = {}
        while waiting:
            jobs = {job for _, job, _ in waiting.values()}
            queued = {job: self.wait_queued(job) for job in jobs}
            for job, tasks in queued.items():
                self.release_requeued(job, tasks, released)
            for name, (run, job, index) in list(waiting.items()):
                if index not in queued[job]:
                    del waiting[name]
                    on_exit(run)
            if waiting:
                time.sleep(self.poll_seconds)

    # ------------------------------------------------------------ one job

    def run_job(self, args: list[str], workdir: str, log=print) -> int:
        """`encoder run --launcher=slurm`: submits one run, follows its log, returns its
        exit status (0 once submitted with --detach)."""
        workdir = os.path.abspath(workdir)
        os.makedirs(workdir, exist_ok=True)
        folder = self.folder or os.path.join(workdir, "slurm")
        os.makedirs(folder, exist_ok=True)
        script = self.single_script(args, workdir, os.path.join(folder, "%j.out"))
        path = os.path.join(folder, f"job-{time.strftime('%Y%m%d-%H%M%S')}.sbatch")
        with open(path, "w") as f:
            f.write(script)
        if self.dry_run:
            log(f"# {path} (dry run: not submitted)\n{script}")
            return 0
        records.clear_exit(workdir)
        run_log = os.path.join(workdir, records.LOG)
        offset = os.path.getsize(run_log) if os.path.exists(run_log) else 0
        job = self.submit(path)
        with open(os.path.join(workdir, LAUNCH), "w") as f:
            json.dump({"launcher": "slurm", "job": job, "index": "", "script": path,
                       "submitted": time.time()}, f)
        log(f"submitted batch job {job} ({self.tasks} JAX process{'es' if self.tasks > 1 else ''}"
            f" on {self.nodes} node{'s' if self.nodes > 1 else ''}); log: {run_log}")
        if self.detach:
            return 0
        released: dict = {}
        while True:
            offset = _follow(run_log, offset, log)
            tasks = self.wait_queued(job)
            if "" not in tasks:
                break
            self.release_requeued(job, tasks, released)
            time.sleep(self.poll_seconds)
        _follow(run_log, offset, log)
        record = records.read_exit(workdir)
        rc = record["rc"] if record else 1
        log(f"job {job} ended: exit {rc}" + ("" if record else " (no exit record: killed "
                                             "or cancelled by the scheduler)"))
        return rc


def _follow(path: str, offset: int, log) -> int:
    """Prints what the log gained since offset; returns the new offset."""
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            text = f.read()
    except OSError:
        return offset
    if text:
        log(text.rstrip("\n"))
    return offset + len(text.encode())
