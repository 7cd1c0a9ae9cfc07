"""The suite's fine-tuning runs: one `encoder.main` process per task x learning rate x seed.

Every run is an ordinary fine-tuning workdir, OUT/runs/<task>/<lr>/<seed>/
(itself a valid init_from), holding the run's log (suite.log) and the flags it
was started with (suite_run.json). A run whose workdir has eval.json and the
same flags is finished and skipped; one without eval.json is started again
and the fine-tuning job resumes it from its last checkpoint; one whose flags
changed (another preset, epochs, data) is moved aside to
<dir>.stale-<time> (nothing is deleted) and runs afresh.

Runs go K at a time (--parallel) as subprocesses. A failed run is reported at
once with its exit code, the end of its log and the log's path, and the
others go on; the caller gets every failure back and reports them again at
the end (never swallowed). Ctrl-C or SIGTERM stops the children with SIGTERM,
which checkpoints them (exit 75), so the next start resumes them.
"""
import dataclasses
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
FINETUNE_EXPERIMENT = os.path.join(REPO, "experiments", "finetune.py")
RECORD = "suite_run.json"
LOG = "suite.log"
STOPPED = 75  # encoder/main.py: stopped by a signal, checkpointed, resumable


@dataclasses.dataclass
class Run:
    task: str
    lr: float
    seed: int
    dir: str
    args: list               # encoder.main flags, --workdir aside
    after: str = ""          # the task whose fine-tuned model this run starts from

    @property
    def log(self) -> str:
        return os.path.join(self.dir, LOG)

    @property
    def label(self) -> str:
        return f"{self.task}/{lr_name(self.lr)}/{self.seed}"


@dataclasses.dataclass
class Failure:
    run: Run
    reason: str

    def __str__(self) -> str:
        return f"{self.run.label}: {self.reason}; log: {self.run.log}"


def lr_name(lr: float) -> str:
    return f"{lr:g}"


def run_dir(root: str, task: str, lr: float, seed: int) -> str:
    return os.path.join(root, "runs", task, lr_name(lr), str(seed))


def finetune_args(task_type: str, init_from: str, files: dict, settings: dict,
                  sets: list | None = None) -> list[str]:
    """encoder.main flags for one fine-tuning run.

    files: train, dev and (optional) test paths. settings: lr, seed, epochs,
    batch_size, warmup_fraction, weight_decay, layer_decay, dropout,
    max_seq_len, pooling, random_init. sets: extra `field=value` overrides.
    """
    s = settings
    args = [f"--config={FINETUNE_EXPERIMENT}:task={task_type},pooling={s['pooling']}",
            f"--config.init_from={init_from}",
            f"--config.data.train_file={files['train']}",
            f"--config.data.dev_file={files['dev']}",
            f"--config.data.max_seq_len={s['max_seq_len']}",
            f"--config.train.learning_rate={s['lr']!r}",
            f"--config.train.num_epochs={s['epochs']}",
            f"--config.train.batch_size={s['batch_size']}",
            f"--config.train.weight_decay={s['weight_decay']!r}",
            f"--config.finetune.warmup_fraction={s['warmup_fraction']!r}",
            f"--config.finetune.layer_decay={s['layer_decay']!r}",
            f"--config.finetune.dropout={s['dropout']!r}",
            f"--config.seed={s['seed']}"]
    if files.get("test"):
        args.append(f"--config.data.test_file={files['test']}")
    if s.get("random_init"):
        args.append("--config.finetune.random_init=True")
    return args + [f"--config.{kv}" for kv in (sets or [])]


def with_init_from(run: Run, init_from: str) -> Run:
    """The run started from another model (an intermediate task's workdir): that
    model's weights are the start, so the random-init switch is dropped."""
    args = [a for a in run.args if not a.startswith(("--config.init_from=",
                                                     "--config.finetune.random_init="))]
    return dataclasses.replace(run, args=[args[0], f"--config.init_from={init_from}"] + args[1:])


def _read_record(d: str):
    path = os.path.join(d, RECORD)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f).get("args")


def finished(run: Run) -> bool:
    return os.path.exists(os.path.join(run.dir, "eval.json")) and _read_record(run.dir) == run.args


def claim(run: Run, log=print) -> None:
    """Makes run.dir this run's folder: a folder of other flags is moved aside first."""
    if os.path.exists(run.dir) and _read_record(run.dir) != run.args:
        aside = f"{run.dir}.stale-{time.strftime('%Y%m%d-%H%M%S')}"
        os.replace(run.dir, aside)
        log(f"rerunning {run.label}: its flags changed; the old run is kept in {aside}")
    os.makedirs(run.dir, exist_ok=True)
    with open(os.path.join(run.dir, RECORD), "w") as f:
        json.dump({"args": run.args}, f, indent=1)


def launch(run: Run, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "encoder.main", *run.args, f"--workdir={run.dir}"]
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH", "")]))
    with open(run.log, "a") as f:  # the child keeps its own handle
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)


def log_tail(path: str, lines: int = 6) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


def outcome(run: Run, rc: int) -> Failure | None:
    """None when the run finished; otherwise what went wrong."""
    if rc == 0 and os.path.exists(os.path.join(run.dir, "eval.json")):
        return None
    if rc == STOPPED:
        return Failure(run, "stopped by a signal (checkpointed: the next start resumes it)")
    if rc == 0:
        return Failure(run, "exited 0 without eval.json")
    return Failure(run, f"exit {rc}")


def execute(runs: list, parallel: int = 1, env: dict | None = None, log=print) -> tuple:
    """Runs what is not finished, `parallel` at a time: (started runs, failures)."""
    pending, active, started, failures = [], [], [], []
    for run in runs:
        if finished(run):
            log(f"skip {run.label} (finished)")
        else:
            pending.append(run)
    try:
        while pending or active:
            while pending and len(active) < max(1, parallel):
                run = pending.pop(0)
                claim(run, log)
                active.append((run, launch(run, env)))
                started.append(run)
                log(f"started {run.label}")
            for run, proc in list(active):
                rc = proc.poll()
                if rc is None:
                    continue
                active.remove((run, proc))
                failure = outcome(run, rc)
                if failure is None:
                    log(f"finished {run.label}")
                else:
                    failures.append(failure)
                    log(f"FAILED {failure}\n{log_tail(run.log)}")
            time.sleep(0.2)
    finally:  # never orphans: an interrupted suite checkpoints its children (SIGTERM)
        stop_children([proc for _, proc in active], timeout=120)
    return started, failures


def stop_children(procs, timeout: float) -> None:
    """SIGTERM every child still running (they checkpoint and exit), then wait; a child
    still alive after `timeout` seconds is killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
