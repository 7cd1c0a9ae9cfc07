"""A one-node SLURM cluster on this machine, for the end-to-end tests (Debian's slurm-wlm, munge).

`Cluster.start(folder)` writes a munge key and a slurm.conf under `folder`,
starts munged, slurmctld and slurmd as this machine's root (each on its own
socket, ports and state folders, so nothing of the host's is touched) and
waits until the node takes jobs; `stop()` ends every daemon it started, by
pid. Clients find the cluster through SLURM_CONF (see `env`).
"""
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str:
    """Why a cluster cannot start here ('' when it can)."""
    absent = [b for b in DAEMONS + ("sbatch", "srun", "squeue", "scontrol")
              if shutil.which(b) is None]
    if absent:
        return f"no {', '.join(absent)} (apt-get install slurm-wlm munge; .ci/run does)"
    if os.geteuid() != 0:
        return "the SLURM daemons run as root here, and this is not root"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """ClusterName=encodertest
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/d
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
KillWait=30
MinJobAge=600
SchedulerParameters=defer_batch=0
SlurmctldParameters=enable_configless
MaxArraySize=1001
NodeName={host} CPUs={cpus} RealMemory={mem} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


@dataclasses.dataclass
class Cluster:
    root: str
    pids: dict = dataclasses.field(default_factory=dict)

    @property
    def conf(self) -> str:
        return os.path.join(self.root, "slurm.conf")

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": self.conf}

    def _start(self, name: str, cmd: list, pidfile: str) -> None:
        log = open(os.path.join(self.root, f"{name}.out"), "w")
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=60,
                       env={**os.environ, **self.env})
        deadline = time.time() + 30
        while not os.path.exists(pidfile) or not open(pidfile).read().strip():
            if time.time() > deadline:
                raise RuntimeError(f"{name} did not start; see {self.root}/{name}.out")
            time.sleep(0.1)
        self.pids[name] = int(open(pidfile).read().strip())

    def start(self) -> "Cluster":
        host = socket.gethostname().split(".")[0]
        for d in ("ctld", "d", "munge"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        key = os.path.join(self.root, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(os.path.join(self.root, "munge"), 0o700)
        sock = os.path.join(self.root, "munge", "munge.socket")
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
        with open(self.conf, "w") as f:
            f.write(CONF.format(host=host, ctld_port=_free_port(), d_port=_free_port(),
                                socket=sock, root=self.root, cpus=os.cpu_count(), mem=mem))
        munge_pid = os.path.join(self.root, "munge", "munged.pid")
        self._start("munged", ["munged", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={munge_pid}", "--force",
                               f"--log-file={self.root}/munge/munged.log",
                               f"--seed-file={self.root}/munge/munged.seed"], munge_pid)
        self._start("slurmctld", ["slurmctld", "-f", self.conf, "-i"],
                    os.path.join(self.root, "slurmctld.pid"))
        self._start("slurmd", ["slurmd", "-f", self.conf],
                    os.path.join(self.root, "slurmd.pid"))
        deadline = time.time() + 60
        while True:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                                 env={**os.environ, **self.env}).stdout.strip()
            if out in ("idle", "mix", "alloc"):
                return self
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"the node did not come up (sinfo: {out!r}); see "
                                   f"{self.root}/slurmctld.log and slurmd.log")
            time.sleep(0.3)

    def stop(self) -> None:
        """Cancels the cluster's jobs (so no slurmstepd outlives it), then SIGTERMs every
        daemon this cluster started (by pid, newest first), then SIGKILLs what remains."""
        env = {**os.environ, **self.env}
        if "slurmctld" in self.pids:
            jobs = subprocess.run(["squeue", "-h", "-o", "%A"], capture_output=True, text=True,
                                  env=env, timeout=30).stdout.split()
            if jobs:
                subprocess.run(["scancel", *sorted(set(jobs))], env=env, timeout=30)
                deadline = time.time() + 20
                while time.time() < deadline and subprocess.run(
                        ["squeue", "-h"], capture_output=True, text=True, env=env,
                        timeout=30).stdout.strip():
                    time.sleep(0.3)
        for name in reversed(list(self.pids)):
            try:
                os.kill(self.pids[name], signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.time() + 15
        for name, pid in reversed(list(self.pids.items())):
            while time.time() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.pids.clear()
