"""The launcher flags of the run, ablate and suite commands (one definition).

    --launcher=local|slurm|tpu_vm
    --slurm_partition --slurm_account --slurm_qos --slurm_time --slurm_nodes --slurm_tasks
    --slurm_gpus_per_node --slurm_cpus_per_task --slurm_mem --slurm_sbatch (repeatable)
    --slurm_setup --slurm_signal_seconds --detach --dry_run
    --tpu --zone --tpu_project --tpu_setup
"""
from absl import flags

from encoder.studies import launchers

flags.DEFINE_enum("launcher", "local", sorted(launchers.LAUNCHERS),
                  "where the runs execute: local subprocesses, a SLURM cluster, a TPU VM slice")
flags.DEFINE_string("slurm_partition", "", "SLURM partition (sbatch --partition)")
flags.DEFINE_string("slurm_account", "", "SLURM account to charge (--account)")
flags.DEFINE_string("slurm_qos", "", "SLURM quality of service (--qos)")
flags.DEFINE_string("slurm_time", "", "time limit per job, e.g. 4:00:00 (--time)")
flags.DEFINE_integer("slurm_nodes", 1, "nodes per run (--nodes)")
flags.DEFINE_integer("slurm_tasks", 1, "JAX processes per run: srun tasks (--ntasks)")
flags.DEFINE_integer("slurm_gpus_per_node", 0, "GPUs per node (--gpus-per-node)")
flags.DEFINE_integer("slurm_cpus_per_task", 0, "CPUs per task (--cpus-per-task)")
flags.DEFINE_string("slurm_mem", "", "memory per node, e.g. 64G (--mem)")
flags.DEFINE_multi_string("slurm_sbatch", [], "an extra #SBATCH line, e.g. "
                          "--slurm_sbatch=--constraint=a100 (repeatable)")
flags.DEFINE_string("slurm_setup", "", "a shell line run before the job, e.g. 'module load "
                    "cuda && source venv/bin/activate'")
flags.DEFINE_integer("slurm_signal_seconds", 120, "SIGTERM this long before the time limit: "
                     "the run checkpoints and requeues itself (0: no signal)")
flags.DEFINE_bool("detach", False, "submit and return (slurm): the records tell the rest; "
                  "start the same command again to wait and report")
flags.DEFINE_bool("dry_run", False, "print the batch scripts or commands, start nothing")
flags.DEFINE_string("tpu", "", "TPU VM name (--launcher=tpu_vm)")
flags.DEFINE_string("zone", "", "TPU VM zone, e.g. us-central2-b")
flags.DEFINE_string("tpu_project", "", "Google Cloud project of the TPU VM ('' : gcloud's)")
flags.DEFINE_string("tpu_setup", "", "a shell line run on every TPU host first, e.g. "
                    "'source ~/venv/bin/activate'")
FLAGS = flags.FLAGS

# The flags `encoder run --launcher=...` takes out of the command before the job gets it.
NAMES = ("launcher", "slurm_partition", "slurm_account", "slurm_qos", "slurm_time",
         "slurm_nodes", "slurm_tasks", "slurm_gpus_per_node", "slurm_cpus_per_task",
         "slurm_mem", "slurm_sbatch", "slurm_setup", "slurm_signal_seconds", "detach",
         "dry_run", "tpu", "zone", "tpu_project", "tpu_setup")


def options(parallel: int = 1, job_name: str = "encoder") -> dict:
    """The chosen launcher's options from the flags (parallel: runs at once)."""
    f = FLAGS
    if f.launcher == "slurm":
        return dict(partition=f.slurm_partition, account=f.slurm_account, qos=f.slurm_qos,
                    time=f.slurm_time, nodes=f.slurm_nodes, tasks=f.slurm_tasks,
                    gpus_per_node=f.slurm_gpus_per_node, cpus_per_task=f.slurm_cpus_per_task,
                    mem=f.slurm_mem, sbatch=tuple(f.slurm_sbatch), setup=f.slurm_setup,
                    signal_seconds=f.slurm_signal_seconds,
                    # the array's cap: --parallel where given, else the cluster decides
                    parallel=parallel if "parallel" in f and f["parallel"].present else 0,
                    job_name=job_name,
                    detach=f.detach, dry_run=f.dry_run)
    if f.launcher == "tpu_vm":
        return dict(tpu=f.tpu, zone=f.zone, project=f.tpu_project, setup=f.tpu_setup,
                    dry_run=f.dry_run)
    return dict(parallel=parallel)


def check() -> None:
    """--dry_run and --detach need a launcher with scripts and a queue (not local)."""
    from encoder import errors
    for name in ("dry_run", "detach"):
        if FLAGS.launcher == "local" and FLAGS[name].value:
            raise errors.UsageError(
                f"--{name} is for --launcher=slurm or tpu_vm (it prints or submits their "
                f"scripts); with the local launcher it would run everything: drop it, or "
                "choose a launcher")


def make(parallel: int = 1, job_name: str = "encoder"):
    check()
    return launchers.make(FLAGS.launcher, **options(parallel, job_name))


def strip(argv: list[str]) -> list[str]:
    """argv without the launcher flags (what the job itself gets)."""
    names = set(NAMES) | {f"no{n}" for n in NAMES}
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a.startswith("--"):
            name, eq, _ = a[2:].partition("=")
            if name in names:
                skip = not eq and not FLAGS[name.removeprefix("no")].boolean \
                    if name.removeprefix("no") in FLAGS else False
                continue
        out.append(a)
    return out
