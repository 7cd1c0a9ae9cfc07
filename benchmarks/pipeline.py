"""The input pipeline: prepare's and the shuffled reader's tokens/s, each against the tiny
model's train step (python -m encoder bench --mode=pipeline)."""
import json
import time

from absl import flags

from benchmarks.common import bench_config
from benchmarks.step import ours

FLAGS = flags.FLAGS


def run():
    import tempfile
    from encoder.data import pipeline, preparation, shards, tokenizer as tokenizer_lib
    from encoder.data import corpus
    docs = corpus.stdlib_documents()
    with tempfile.TemporaryDirectory() as tmp:
        tok = tokenizer_lib.load(tokenizer_lib.train_sentencepiece(docs, f"{tmp}/sp", 8000))
        t0 = time.perf_counter()
        manifest = preparation.prepare(preparation.STDLIB, f"{tmp}/prep", tokenizer=tok.path)
        prep_s = time.perf_counter() - t0
        c = shards.PreparedCorpus(f"{tmp}/prep")
        rows = shards.PackedRows(c, "train", FLAGS.seq_len, tok.cls_id, tok.sep_id, tok.pad_id)
        t0 = time.perf_counter()
        n = sum(int(b["attention_mask"].sum())
                for b in pipeline.batch_iterator(rows, 32, seed=0, repeat=False))
        read_s = time.perf_counter() - t0
    FLAGS.size, FLAGS.vocab_size = "tiny", 8000
    from encoder.aot import chips
    step = ours(bench_config(), chips.peak_flops_per_device())
    tokens = manifest["splits"]["train"]["tokens"] + manifest["splits"]["valid"]["tokens"]
    print(json.dumps({"benchmark": "pipeline", "documents": len(docs), "tokens": n,
                      "prepare_tokens_per_s": round(tokens / prep_s),
                      "read_tokens_per_s": round(n / read_s),
                      "tiny_train_step_tokens_per_s": step["tokens_per_s"],
                      "read_over_train_step": round(n / read_s / step["tokens_per_s"], 1),
                      "prepare_over_train_step": round(tokens / prep_s / step["tokens_per_s"],
                                                       1)}))
