"""`python -m encoder baselines`: the no-model baselines of
one task's files; the methods are encoder/tasks/baselines.py."""
import json

from absl import flags

from encoder import errors
from encoder.tasks import baselines, table
from encoder.commands.one_line import one_line_errors

flags.DEFINE_enum("task", table.DEFAULT, table.having("baselines"),
                  "the task type (those with a baseline)")
flags.DEFINE_string("train", None, "train file", required=True)
flags.DEFINE_string("dev", None, "dev file", required=True)
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    print(json.dumps(baselines.run(FLAGS.task, FLAGS.train, FLAGS.dev), indent=1))
