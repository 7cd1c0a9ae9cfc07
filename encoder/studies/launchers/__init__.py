"""Where a study's runs execute: one entry per launcher (`--launcher=local|slurm|tpu_vm`).

Each launcher has `run(runs, on_exit, log)`: start every run's
`python -m encoder.main --config=WORKDIR/job_config.py --workdir=WORKDIR`,
call on_exit(run) as each ends (its exit status is in WORKDIR/exit.json by
then), and stop what it started if interrupted.
"""
from encoder import registry
from encoder.studies.launchers import local

LAUNCHERS = {"local": local.Local}


def make(name: str, **options):
    return registry.lookup(LAUNCHERS, name, "launcher")(**options)
