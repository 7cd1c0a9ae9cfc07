"""`python -m encoder run`: a job from an experiment file;
its config.mode picks the job.

    pretrain  python -m encoder run --config=experiments/pretrain.py:size=tiny --workdir=DIR
    finetune  python -m encoder run --config=experiments/finetune.py:task=qa --workdir=DIR ...
    evaluate  python -m encoder run --config=experiments/evaluate.py --config.init_from=CKPT ...
    embed     python -m encoder run --config=experiments/embed.py --config.init_from=CKPT ...

--launcher=slurm (--slurm_tasks=N --slurm_nodes=M ...) submits the same command as one
SLURM job of N JAX processes, prints its id and follows it to its exit status (--detach:
return at once); --launcher=tpu_vm --tpu=NAME --zone=Z starts it on every host of a
TPU VM slice (encoder/studies/launchers/).
"""
import json
import signal
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from encoder import errors, registry, tether

from encoder.commands import launcher_flags  # --launcher and its options
from encoder.commands.one_line import one_line_errors

config_flags.DEFINE_config_file("config", None, "experiment file[:arg]", lock_config=True)
flags.DEFINE_string("workdir", None, "where checkpoints, metrics and the tokenizer go",
                    required=True)
FLAGS = flags.FLAGS


def init_distributed(dist_cfg) -> None:
    """jax.distributed.initialize: explicit flags, 'auto' for managed clusters, or none."""
    import jax
    if dist_cfg.coordinator_address == "auto":
        jax.distributed.initialize()
    elif dist_cfg.coordinator_address:
        jax.distributed.initialize(dist_cfg.coordinator_address, dist_cfg.num_processes,
                                   dist_cfg.process_id)


def _pretrain(config, workdir):
    from encoder.jobs import pretrain
    return pretrain.train(config, workdir)


def _finetune(config, workdir):
    from encoder.jobs import finetune
    return finetune.finetune(config, workdir)


def _evaluate(config, workdir):
    from encoder.jobs import evaluate
    return evaluate.evaluate(config, workdir)


def _embed(config, workdir):
    from encoder.jobs import evaluate
    return evaluate.embed(config, workdir)


def _suite(config, workdir):
    from encoder.jobs import suite
    return suite.run(config, workdir)


# config.mode -> the job (imported when chosen: each pulls in JAX and its own libraries);
# suite: a study's downstream suite as a run of its runner (encoder/jobs/suite.py)
JOBS = {"pretrain": _pretrain, "finetune": _finetune, "evaluate": _evaluate, "embed": _embed,
        "suite": _suite}
RESUMABLE = ("pretrain", "finetune")  # a stopped run of these resumes from its checkpoint


def _report(mode: str, result: dict, config) -> None:
    """The result's JSON; pretraining's held-out figures beside their baselines, last."""
    if mode != "pretrain":
        print(json.dumps(result, indent=1))
        return
    summary = {k: v for k, v in result.items() if k.startswith(("eval/", "data/")) or k in (
        "step", "train/loss", "parameters")}
    print(json.dumps(summary, indent=1))
    from encoder.objectives import objectives  # the objective's own lines (its table row)
    for line in objectives.summary(config, result):
        print(line)


def typed(argv: list[str], field: str) -> bool:
    """Whether the command line sets --config.FIELD (=value or as the next argument)."""
    flag = f"--config.{field}"
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def phases_note(config, argv: list[str]) -> str | None:
    """A typed train.num_steps that phases replace by their sum, said (None: nothing to say)."""
    if not config.get("phases") or not typed(argv, "train.num_steps"):
        return None
    from encoder.train import phases as phases_lib
    plan = phases_lib.plan(config)
    if plan.total_steps == int(config.train.num_steps):
        return None
    parts = " + ".join(f"{ph.name} {ph.steps:,}" for ph in plan.phases)
    return (f"--config.train.num_steps={config.train.num_steps} does not set this run's "
            f"length: with phases declared it is their sum, {plan.total_steps:,} steps "
            f"({parts}); set a phase's steps= or tokens= (--config.phases) to change it")


def _run(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it writes at INFO
    config = FLAGS.config
    if config is None:
        raise app.UsageError("--config=experiments/NAME.py[:arg] is required (the experiment "
                             "to run: experiments/pretrain.py, finetune.py, evaluate.py, "
                             "embed.py or a recipe)")
    mode = config.get("mode", "pretrain")
    job = registry.lookup(JOBS, mode, "config.mode")
    note = phases_note(config, sys.argv) if mode == "pretrain" else None
    if note:
        print(f"warning: {note}", file=sys.stderr, flush=True)
    if "distributed" in config:
        init_distributed(config.distributed)
    result = job(config, FLAGS.workdir)
    if result.get("stopped"):  # stopped by SIGTERM/Ctrl-C: not a finished run (exit 75)
        # decided: a second SIGTERM (a scheduler's and a user's) must not turn the exit into
        # 143 on the way out, which a SLURM job would not requeue. SIG_IGN, not the
        # interrupt handler told it was seen: Python resets the handlers it installed to
        # the default while it finalizes, and a SIGTERM then still ended the process (143)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"stopped at step {result.get('step')} (checkpoint saved); run the same command "
              "again to resume", flush=True)
        raise SystemExit(errors.STOPPED_EXIT_CODE)
    _report(mode, result, config)


def _launch() -> None:
    """--launcher=slurm|tpu_vm: this very command, less the launcher flags, as a job there."""
    import sys
    launcher = launcher_flags.make(job_name="encoder-main")
    args = launcher_flags.strip(sys.argv[1:])
    raise SystemExit(launcher.run_job(args, FLAGS.workdir))


def _resumable() -> bool:
    """Ctrl-C outside the training loop: a pretraining or fine-tuning run resumes (75)."""
    return FLAGS.config is not None and FLAGS.config.get("mode", "pretrain") in RESUMABLE


def main(argv):
    """_run, with the errors a user can act on reported in one line (no traceback)."""
    tether.hold()  # started by a study: SIGTERM (checkpoint, exit 75) when the study dies
    one_line_errors(lambda _: launcher_flags.check())(argv)
    if FLAGS.launcher != "local":
        _launch()
    one_line_errors(_run, resumable=_resumable)(argv)
