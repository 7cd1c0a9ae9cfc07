"""The `python -m encoder.retrieval.mine` command: its flags; the job is encoder/jobs/mine.py."""
from absl import app, flags

from encoder import errors
from encoder.jobs import mine

if __name__ == "__main__":
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
    app.run(errors.one_line_errors(mine.main), flags_parser=errors.parse_flags)
