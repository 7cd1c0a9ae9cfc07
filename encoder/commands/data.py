"""`python -m encoder data`: which source, shard and record made each row of a pretraining
step, rebuilt from the run's workdir.

    python -m encoder data --workdir=W --step=N [--out=FILE.jsonl] [--text_chars=80]

Step N is the step metrics.jsonl calls N. The job (what is read, how the order is drawn
again) is encoder/jobs/data_order.py.
"""
from absl import flags, logging

from encoder import errors
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("workdir", None, "a pretraining run's workdir", required=True)
flags.DEFINE_integer("step", None, "the step (as metrics.jsonl numbers it, from 1)",
                     required=True, lower_bound=1)
flags.DEFINE_string("out", "", "write one JSON line a row here (else print them)")
flags.DEFINE_integer("text_chars", 80, "characters of each row's text shown (0: none)",
                     lower_bound=0)
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from encoder.jobs import data_order
    header, rows = data_order.step_rows(FLAGS.workdir, FLAGS.step, FLAGS.text_chars)
    lines = data_order.describe(header, rows)
    if FLAGS.out:
        data_order.write(rows, FLAGS.out)
        print(f"{lines[0]}; {len(rows)} rows written to {FLAGS.out}")
    else:
        print("\n".join(lines))
