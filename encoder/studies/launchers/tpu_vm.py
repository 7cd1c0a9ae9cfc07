"""The TPU VM launcher: every host of a Cloud TPU slice runs the same command over ssh.

    python -m encoder run ... --launcher=tpu_vm --tpu=NAME --zone=us-central2-b

builds (big_vision's and EasyLM's way of starting a pod slice)

    gcloud compute tpus tpu-vm ssh NAME --zone=ZONE [--project=P] --worker=all \\
        --command='cd REPO && SETUP && python -m encoder run FLAGS \\
                   --config.distributed.coordinator_address=auto'

where jax.distributed finds the slice's hosts by itself. A study runs its runs
one after another, each over the whole slice; the command's exit status goes
to the run's exit.json (the workdir must be on storage every host and this
machine see). --dry_run prints the commands. Nothing here can run without a
slice: the tests check the command it builds.
"""
import dataclasses
import shlex
import subprocess

from encoder.studies import records, runner


@dataclasses.dataclass
class TpuVm:
    tpu: str = ""
    zone: str = ""
    project: str = ""
    setup: str = ""                # e.g. "source ~/venv/bin/activate"
    repo: str = runner.REPO        # the checkout's path on the TPU hosts
    python: str = "python3"
    dry_run: bool = False
    detach: bool = False           # not offered: ssh --worker=all waits for every host

    detached = property(lambda self: self.dry_run)

    def check(self) -> None:
        if not self.tpu or not self.zone:
            raise ValueError(f"--launcher=tpu_vm needs --tpu and --zone (got tpu={self.tpu!r}, "
                             f"zone={self.zone!r})")

    def remote(self, args: list[str]) -> str:
        """The shell line every host runs."""
        main = " ".join(shlex.quote(a) for a in [
            self.python, "-m", "encoder", "run", *args,
            "--config.distributed.coordinator_address=auto"])
        return " && ".join([f"cd {shlex.quote(self.repo)}"] + ([self.setup] if self.setup
                                                               else []) + [main])

    def command(self, args: list[str]) -> list[str]:
        """The gcloud argv that starts `encoder run args` on every host of the slice."""
        self.check()
        cmd = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", self.tpu, f"--zone={self.zone}"]
        if self.project:
            cmd.append(f"--project={self.project}")
        return cmd + ["--worker=all", f"--command={self.remote(args)}"]

    def run_job(self, args: list[str], workdir: str, log=print) -> int:
        cmd = self.command(args)
        log(shlex.join(cmd))
        if self.dry_run:
            return 0
        return subprocess.run(cmd).returncode

    def run(self, runs: list, on_exit, log=print) -> None:
        for run in runs:
            rc = self.run_job(runner.job_args(run), run.workdir, log)
            if self.dry_run:
                continue
            records.write_exit(run.workdir, rc, launcher="tpu_vm", tpu=self.tpu)
            on_exit(run)
