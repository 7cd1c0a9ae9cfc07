"""`python -m encoder probe`: per-layer linear probes of a model;
the job is encoder/jobs/probe.py."""
from absl import flags, logging

from encoder import errors
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("init_from", None, "a workdir of this codebase or hf:DIR", required=True)
flags.DEFINE_list("tasks", None, "task folders (train.jsonl, dev.jsonl)", required=True)
flags.DEFINE_string("out", None, "where probes.json and probes.png go", required=True)
flags.DEFINE_bool("random_init", False, "probe the same architecture at random init")
flags.DEFINE_integer("max_train", 2000, "training examples per task (0: all)", lower_bound=0)
flags.DEFINE_integer("max_tokens", 20000, "training words per tagging probe (0: all)",
                     lower_bound=0)
flags.DEFINE_integer("max_len", 128, "tokens per input", lower_bound=2)
flags.DEFINE_integer("seed", 0, "subsampling, control shuffle and random-init seed")
flags.DEFINE_float("max_held_out_overlap", 0.01, "the largest share of dev rows that may "
                   "also be training rows (by content)", lower_bound=0.0, upper_bound=1.0)
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO
    from encoder.jobs import probe
    f = FLAGS
    probe.probe(f.init_from, f.tasks, f.out, f.random_init, f.max_train, f.max_tokens,
                f.max_len, f.seed, f.max_held_out_overlap)
