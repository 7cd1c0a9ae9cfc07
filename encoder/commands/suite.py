"""`python -m encoder suite`: the downstream verdict in one command: a GLUE-style battery, embeddings and probes.

    python -m encoder suite --init_from=CKPT|hf:DIR [--tasks=DIR] --workdir=OUT \\
        [--seeds=N] [--learning_rates=a,b,c] [--parallel=K] [--preset=default] \\
        [--probe | --probe_only] [--random_init] [--train_per_class=K] \\
        [--launcher=local|slurm|tpu_vm --slurm_partition=P ... --detach]
    python -m encoder suite --baseline=bow|majority|bm25 [--tasks=DIR] --workdir=OUT \\
        [--only=...] [--train_per_class=K] [--max_train=N] [--max_eval=N] [--seeds=N]

Without --tasks it builds the embedded default suite from the standard
library's documentation (every task type). Writes OUT/suite.csv, suite.md,
suite.png, suite.json and runs.csv; every fine-tuning run is a workdir under
OUT/runs/<task>/<lr>/<seed>/, finished ones are skipped and interrupted ones
resumed. The conventions are in encoder/studies/suite/presets.py. --baseline
scores a method with no model (TF-IDF bag of words, the majority class, or BM25
for the retrieval tasks) on the same data into the same files (encoder/studies/suite/baseline.py).
"""
import math
import os
import shutil

from absl import app, flags, logging

from encoder import errors, tether
from encoder.commands import launcher_flags  # --launcher and its options
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("init_from", None, "the model: a workdir of this codebase, a params "
                    "folder, or hf:DIR (or give --baseline)")
flags.DEFINE_string("baseline", "", "score a method with no model instead: bow (TF-IDF) | "
                    "majority | bm25 (retrieval tasks only) (encoder/studies/suite/"
                    "baseline.py); not with --init_from")
flags.DEFINE_string("workdir", None, "the suite's output folder", required=True)
flags.DEFINE_string("tasks", "", "a folder of task folders (GLUE's layout, JSONL with "
                    "task.json, STS, BEIR retrieval); empty: the embedded default suite")
flags.DEFINE_string("preset", "default", "conventions: default | runlocal | electra | "
                    "roberta | modernbert | bert (encoder/studies/suite/presets.py)")
flags.DEFINE_integer("seeds", 0, "seeds per learning rate (0: the preset's)")
flags.DEFINE_list("learning_rates", [], "the learning-rate grid (empty: the preset's)")
flags.DEFINE_integer("epochs", -1, "epochs for every task (-1: the preset's per task)")
flags.DEFINE_integer("parallel", 1, "fine-tuning runs at once")
flags.DEFINE_bool("probe", False, "per-layer linear probes (layer x task table, heatmap)")
flags.DEFINE_bool("probe_only", False, "the probes and the embedding tasks alone: no "
                  "fine-tuning run")
flags.DEFINE_bool("random_init", False, "the same architecture and tokenizer from random "
                  "initialisation: the control for every pretraining claim")
flags.DEFINE_string("pooling", "", "fine-tuning pooling (empty: the preset's)")
flags.DEFINE_string("embedding_pooling", "mean", "pooling for the embedding tasks")
flags.DEFINE_string("retriever", "", "retrieval tasks scored by each of these methods side by "
                    "side (quality, bytes per passage, queries/s, SPLADE's terms): a list of "
                    "bm25, dense, colbert, plaid (ColBERT, compressed), sparse; empty: the model as "
                    "it was trained")
flags.DEFINE_integer("max_train", -1, "training examples per task and seed (-1: preset; 0: all)")
flags.DEFINE_integer("max_eval", -1, "dev examples / queries per task (-1: preset; 0: all)")
flags.DEFINE_integer("train_per_class", 0, "few-shot regime: k training examples per class "
                     "(classification tasks; drawn per seed)")
flags.DEFINE_enum("intermediate", "preset", ["preset", "on", "off"],
                  "start RTE, MRPC and STS-B from the fine-tuned MNLI model")
flags.DEFINE_list("only", [], "run only these tasks")
flags.DEFINE_multi_string("finetune_set", [], "field=value for every fine-tuning run, e.g. "
                          "finetune.layer_decay=0.8 (repeatable)")
flags.DEFINE_integer("probe_max_train", 2000, "training examples per probe")
flags.DEFINE_string("watch", "", "a pretraining workdir: run this suite on each of its "
                    "checkpoints once, as it trains, into --workdir/step_N/ and "
                    "--workdir/curve.jsonl (encoder/studies/watch.py)")
flags.DEFINE_float("watch_poll", 60.0, "--watch: seconds between looks for new checkpoints")
flags.DEFINE_bool("watch_once", False, "--watch: score the checkpoints there now, then stop")
flags.DEFINE_bool("watch_follow_job", False, "--watch: wait for the run to start; end when its "
                  "job has ended (its exit record), finished or not (what `encoder ablate` "
                  "--watch starts)")
FLAGS = flags.FLAGS

# the integer flags' ranges: (smallest value, a value below it that means "the preset's"
# or None, what the range says); checked as flags, before tasks are built or a run starts
INTEGER_RANGES = {
    "seeds": (0, None, "0 (the preset's) or a count of seeds"),
    "epochs": (1, -1, "-1 (the preset's per task) or a count of epochs >= 1"),
    "parallel": (1, None, "a count of runs at once >= 1"),
    "max_train": (0, -1, "-1 (the preset's), 0 (all) or a count of examples"),
    "max_eval": (0, -1, "-1 (the preset's), 0 (all) or a count of examples"),
    "train_per_class": (0, None, "0 (off) or k examples per class"),
    "probe_max_train": (1, None, "a count of examples >= 1"),
}


def _in_range(low: int, special):
    return lambda v: v is None or v >= low or (special is not None and v == special)


def _learning_rates(values) -> bool:
    try:
        return all(math.isfinite(float(v)) and float(v) > 0 for v in values)
    except ValueError:
        return False


for _name, (_low, _special, _says) in INTEGER_RANGES.items():
    flags.register_validator(_name, _in_range(_low, _special), f"expected {_says}")
flags.register_validator("learning_rates", _learning_rates,
                         "each learning rate a finite number > 0")


# What a suite's folder holds before its first score, all rebuilt by a rerun.
REBUILT = {".encoder-output.json", "LOCK", "tasks", "data"}


def _watch(opts) -> None:
    """--watch: the suite on each checkpoint of a run, once, into a folder of its own."""
    from encoder.studies import watch
    from encoder.studies.suite import battery
    from encoder.train.workdir import Lock
    errors.check_output(FLAGS.workdir, "watch", "--workdir")
    with Lock(FLAGS.workdir):  # one watcher a folder
        errors.mark_output(FLAGS.workdir, "watch", run=os.path.abspath(FLAGS.watch))
        result = watch.watch(os.path.abspath(FLAGS.watch), os.path.abspath(FLAGS.workdir),
                             opts, battery.run_suite, FLAGS.watch_poll, FLAGS.watch_once,
                             follow_job=FLAGS.watch_follow_job)
    print(f"watched {FLAGS.watch}: {len(result['scored'])} checkpoints scored "
          f"({FLAGS.workdir}/curve.jsonl)" + (f", {len(result['missed'])} missed"
                                               if result["missed"] else ""))


@one_line_errors(resumable=True)
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO
    tether.hold()  # started by `encoder ablate`: SIGTERM when the ablation dies
    # (SIGTERM takes the Ctrl-C path in every command, one_line_errors: Python's default
    # SIGTERM exit skipped runs.execute's `finally` and orphaned the fine-tuning children.)
    from encoder.tasks.readers import TaskDataError
    from encoder.studies.suite import battery
    f = FLAGS
    try:
        lrs = tuple(float(x) for x in f.learning_rates)
    except ValueError:
        raise app.UsageError(f"--learning_rates must be numbers, got {f.learning_rates}") from None
    if f.watch and (f.init_from or f.baseline):
        raise app.UsageError("--watch scores a run's checkpoints: not with --init_from or "
                             "--baseline")
    if not f.init_from and not f.baseline and not f.watch:
        raise app.UsageError("give the model (--init_from), a run to --watch, or a --baseline")
    opts = battery.SuiteOptions(
        init_from=f.init_from or "", workdir=f.workdir, tasks=f.tasks, preset=f.preset,
        baseline=f.baseline, seeds=f.seeds, learning_rates=lrs, epochs=f.epochs,
        parallel=f.parallel, probe=f.probe, random_init=f.random_init, pooling=f.pooling,
        embedding_pooling=f.embedding_pooling, max_train=f.max_train, max_eval=f.max_eval,
        train_per_class=f.train_per_class, intermediate=f.intermediate, only=tuple(f.only),
        finetune_set=tuple(f.finetune_set), probe_max_train=f.probe_max_train,
        probe_only=f.probe_only, launcher=f.launcher, retriever=f.retriever,
        # a local suite takes --parallel itself; the options are a cluster launcher's
        launcher_options=(launcher_flags.options(f.parallel, job_name="suite")
                          if f.launcher != "local" else None))
    from encoder.studies.suite import frozen
    frozen.check_methods(opts)  # --retriever's names, before anything is read
    if f.watch:
        return _watch(opts)
    # The suite's folder: new, empty or an earlier suite's; one suite at a time on it (a
    # second refuses at start instead of colliding run by run).
    from encoder.train.workdir import Lock
    state = errors.check_output(f.workdir, "suite", "--workdir", legacy=lambda d: any(
        os.path.exists(os.path.join(d, n)) for n in ("runs", "suite.json", "suite.csv")))
    emptied = False
    try:
        with Lock(f.workdir):
            try:
                errors.mark_output(f.workdir, "suite")
                result = battery.run_suite(opts)
            except BaseException:
                # Refused (or stopped) before any score, in a folder this suite created:
                # it holds only what a rerun rebuilds (the embedded tasks, prepared data).
                # Emptied under the lock (a second suite refused by it touches nothing).
                emptied = state == "new" and set(os.listdir(f.workdir)) <= REBUILT
                if emptied:
                    for name in set(os.listdir(f.workdir)) - {"LOCK"}:
                        path = os.path.join(f.workdir, name)
                        if os.path.isdir(path):
                            shutil.rmtree(path)
                        else:
                            os.remove(path)
                raise
    except BaseException as e:
        if emptied:
            try:
                os.rmdir(f.workdir)  # empty once the lock is released
            except OSError:
                pass
        elif state != "ours":  # refused before writing anything: leave no marker, no folder
            errors.discard_if_untouched(f.workdir, created=state == "new")
        if isinstance(e, (TaskDataError, FileNotFoundError, ValueError)):
            raise SystemExit(f"error: {e}") from None
        raise
    if result.get("detached"):
        return
    if result["failed"]:
        raise SystemExit(1)

