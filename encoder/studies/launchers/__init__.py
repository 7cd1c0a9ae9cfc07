"""Where a study's runs execute: one entry per launcher (`--launcher=local|slurm|tpu_vm`).

Each launcher has `run(runs, on_exit, log)`: start every run's
`python -m encoder run --config=WORKDIR/job_config.py --workdir=WORKDIR`,
call on_exit(run) as each ends (its exit status is in WORKDIR/exit.json by
then), and stop what it started if interrupted; `detached` says it returned
before its runs ended (--detach, --dry_run): the study then writes no report.
The SLURM and TPU VM launchers also have `run_job(args, workdir)`, which
`python -m encoder run --launcher=...` calls for one run. Their command-line
flags are in encoder/commands/launcher_flags.py, shared by the run, ablate and suite commands.
"""
from encoder import registry
from encoder.studies.launchers import local, slurm, tpu_vm

LAUNCHERS = {"local": local.Local, "slurm": slurm.Slurm, "tpu_vm": tpu_vm.TpuVm}


def make(name: str, **options):
    return registry.lookup(LAUNCHERS, name, "launcher")(**options)
