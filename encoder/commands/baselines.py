"""`python -m encoder baselines`: the no-model baselines of
one task's files; the methods are encoder/tasks/baselines.py."""
import json

from absl import flags

from encoder import errors
from encoder.tasks import baselines, table
from encoder.commands.one_line import one_line_errors

flags.DEFINE_enum("task", table.DEFAULT, table.having("baselines"),
                  "the task type (those with a baseline)")
flags.DEFINE_string("train", None, "the training file (JSONL, GLUE TSV)", required=True)
flags.DEFINE_string("dev", None, "the dev file, labelled (JSONL, GLUE TSV)", required=True)
flags.DEFINE_float("max_held_out_overlap", 0.01, "the largest share of dev rows that may "
                   "also be training rows (same text, whitespace aside); past it: refused")
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if not 0 <= FLAGS.max_held_out_overlap <= 1:
        raise errors.UsageError(f"--max_held_out_overlap must be a share in [0, 1], got "
                                f"{FLAGS.max_held_out_overlap}")
    print(json.dumps(baselines.run(FLAGS.task, FLAGS.train, FLAGS.dev,
                                   max_overlap=FLAGS.max_held_out_overlap), indent=1))
