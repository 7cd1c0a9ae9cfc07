"""`python -m encoder merge`: average or merge checkpoints into a params folder.

    python -m encoder merge --workdirs=A,B,... --out=DIR [--method=average|weighted]
        [--weights=w1,w2,...] [--last=K] [--tree=params|ema]

The job (what is checked, what is written) is encoder/jobs/merge.py.
"""
import json

from absl import app, flags, logging

from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("workdirs", None, "comma-separated pretraining workdirs, each WORKDIR or "
                    "WORKDIR@STEP", required=True)
flags.DEFINE_string("out", None, "the params folder to write (a valid init_from)", required=True)
flags.DEFINE_string("method", "average", "encoder.jobs.merge.METHODS: average | weighted")
flags.DEFINE_string("weights", "", "--method=weighted: one weight per checkpoint")
flags.DEFINE_integer("last", 0, "take each bare WORKDIR's K newest checkpoints (0: its newest)")
flags.DEFINE_string("tree", "params", "params | ema (the runs' parameter EMAs)")
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO
    from encoder.jobs import merge
    try:
        record = merge.merge(FLAGS.workdirs, FLAGS.out, FLAGS.method, FLAGS.weights,
                             FLAGS.last, FLAGS.tree)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"error: {e}") from None
    print(json.dumps(record, indent=1))

