"""`python -m encoder tasks`: the embedded downstream tasks,
built from the standard library's documentation (encoder/data/embedded_tasks.py)."""
import json

from absl import flags

from encoder import errors
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("out", None, "the folder to write the tasks into (new, empty, or an "
                    "earlier build)",
                    required=True)
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.out.strip():
        raise errors.UsageError("--out is empty: give the folder to write the tasks into")
    from encoder.data import embedded_tasks
    print(json.dumps(embedded_tasks.write_tasks(FLAGS.out)))
