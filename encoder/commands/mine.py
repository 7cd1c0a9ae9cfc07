"""`python -m encoder mine`: hard negatives for a pairs file;
the job is encoder/jobs/mine.py."""
import json

import numpy as np
from absl import flags, logging

from encoder import errors
from encoder.commands.one_line import one_line_errors

flags.DEFINE_string("init_from", None, "the model: a workdir, a params folder or hf:DIR",
                    required=True)
flags.DEFINE_string("pairs", None, "JSONL of {text_a, text_b} pairs", required=True)
flags.DEFINE_string("corpus", "", "a BEIR corpus.jsonl to mine from (default: the pairs' "
                    "own text_b)")
flags.DEFINE_string("out", None, "JSONL to write: {text_a, text_b, negatives}", required=True)
flags.DEFINE_integer("num_negatives", 5, "negatives kept per pair")
flags.DEFINE_integer("range_min", 0, "skip the top range_min candidates")
flags.DEFINE_integer("range_max", 0, "candidates searched per pair (0: range_min + "
                     "4 num_negatives + 1)")
flags.DEFINE_float("absolute_margin", None, "drop a candidate with score + m > positive's")
flags.DEFINE_float("relative_margin", None, "drop a candidate with score > positive's "
                   "- |positive's| r (NV-Retriever: 0.05)")
flags.DEFINE_float("max_score", None, "drop a candidate scoring above this")
flags.DEFINE_string("pooling", "", "pooling rule (default: the run's, else mean)")
flags.DEFINE_integer("max_len", 128, "tokens per text")
flags.DEFINE_string("query_prefix", "", "prepended to each text_a (e.g. 'query: ')")
flags.DEFINE_string("passage_prefix", "", "prepended to each passage")
flags.DEFINE_bool("scores", False, "the model as a teacher: write {text_a, passages, scores}, "
                  "its score (scale x similarity) per passage, for contrastive.loss="
                  "margin_mse|kl")
FLAGS = flags.FLAGS


@one_line_errors
def main(argv):
    if len(argv) > 1:
        raise errors.UsageError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # orbax logs every file it reads at INFO
    from encoder.jobs import mine
    filters = {name: getattr(FLAGS, name) for name in
               ("range_min", "range_max", "absolute_margin", "relative_margin", "max_score")}
    stats = mine.mine_file(FLAGS.init_from, FLAGS.pairs, FLAGS.out, FLAGS.corpus,
                           FLAGS.num_negatives, FLAGS.pooling, FLAGS.max_len, FLAGS.query_prefix,
                           FLAGS.passage_prefix, FLAGS.scores, **filters)
    print(json.dumps(stats), flush=True)
    return 0 if np.isfinite(stats["mean_positive_score"]) else 1
