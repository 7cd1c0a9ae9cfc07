"""Compiled memory of an MLM forward + backward pass per attention backend, ahead of time.

Lowered and compiled for abstract inputs (nothing runs), so a long packed row
can be sized on a laptop: XLA's memory_analysis of the compiled program gives
the bytes of its arguments, outputs and temporaries. Comparing backends at the
same shapes shows what the dense [B, 1, T, T] mask and the T x T scores cost.

On CPU the Pallas kernels compile in interpret mode: a loop over the kernel's
grid, reading one block of q/k/v/segment ids at a time. Its temporaries are
the blocked algorithm's (no T x T array exists), not TPU/GPU on-chip buffers,
so the figure bounds what the kernel path needs in device memory; the dense
paths' figures are XLA's own on any platform.

    python -m benchmarks.attention_memory --config=experiments/modernbert_base.py \\
        --num_layers=4 --seq_len=2048 --batch_size=1 --impls=xla,splash

Prints one JSON line per backend (run from the repository root).
"""
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from encoder.model import models


def packed_batch(batch_size: int, seq_len: int, documents: int, vocab_size: int,
                 predictions: int) -> dict:
    """A packed MLM batch: `documents` equal documents per row, the last one half padding.

    Concrete numpy arrays; only their shapes and dtypes reach the compiler.
    """
    doc_len = -(-seq_len // documents)  # ceil
    docs = np.minimum(np.arange(seq_len) // doc_len + 1, documents)  # [T], ids 1..documents
    real = np.arange(seq_len) < seq_len - doc_len // 2
    starts = (docs - 1) * doc_len
    rows = lambda a: np.broadcast_to(a, (batch_size, seq_len)).astype(np.int32)  # noqa: E731
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(5, vocab_size, (batch_size, seq_len)).astype(np.int32),
        "segment_ids": np.zeros((batch_size, seq_len), np.int32),
        "attention_mask": rows(real),
        "document_ids": rows(np.where(real, docs, 0)),
        "positions": rows(np.where(real, np.arange(seq_len) - starts, 0)),
        "mlm_positions": np.tile(np.arange(predictions, dtype=np.int32), (batch_size, 1)),
        "mlm_labels": rng.integers(5, vocab_size, (batch_size, predictions)).astype(np.int32),
    }


def _loss_and_grads(model):
    """(params, batch) -> (MLM loss, grads): the forward + backward pass a train step runs."""
    def loss(params, batch):
        out, _ = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                             batch["attention_mask"], batch["positions"], batch["document_ids"],
                             batch["mlm_positions"])
        logp = jax.nn.log_softmax(out["mlm_logits"].astype(jnp.float32))  # [B, P, V]
        return -jnp.mean(jnp.take_along_axis(logp, batch["mlm_labels"][..., None], -1))
    return jax.value_and_grad(loss)


def measure(model_cfg, batch_size: int, seq_len: int, attention_impl: str,
            documents: int = 4, mask_rate: float = 0.3) -> dict:
    """Compiled memory (bytes) of one forward + backward pass with the given backend."""
    cfg = models.freeze({**dict(model_cfg.items()), "attention_impl": attention_impl,
                         "max_position": max(model_cfg.max_position, seq_len)})
    models.validate_config(cfg, seq_len)
    model = models.MaskedLM(cfg)
    predictions = max(1, int(np.ceil(seq_len * mask_rate)))
    batch = packed_batch(batch_size, seq_len, documents, cfg.vocab_size, predictions)
    abstract_batch = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), batch)
    init_args = [batch[k] for k in ("input_ids", "segment_ids", "attention_mask", "positions",
                                    "document_ids", "mlm_positions")]
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), *init_args))["params"]
    params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    start = time.perf_counter()
    compiled = jax.jit(_loss_and_grads(model)).lower(params, abstract_batch).compile()
    seconds = time.perf_counter() - start
    mem = compiled.memory_analysis()
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
              "alias_size_in_bytes", "generated_code_size_in_bytes")
    out = {f: int(getattr(mem, f, 0) or 0) for f in fields}
    out["peak_bytes"] = (out["argument_size_in_bytes"] + out["output_size_in_bytes"]
                         + out["temp_size_in_bytes"] - out["alias_size_in_bytes"])
    return {"attention_impl": attention_impl, "platform": jax.default_backend(),
            "batch_size": batch_size, "seq_len": seq_len, "num_layers": cfg.num_layers,
            "local_window": cfg.local_window, "global_every": cfg.global_every,
            "dtype": cfg.dtype, "compile_s": round(seconds, 2), **out}


def main(argv):
    del argv
    from absl import flags
    cfg = flags.FLAGS.config.model
    cfg.update({k: v for k, v in (("num_layers", flags.FLAGS.num_layers),
                                  ("dtype", flags.FLAGS.dtype)) if v})
    for impl in flags.FLAGS.impls:
        print(json.dumps(measure(cfg, flags.FLAGS.batch_size, flags.FLAGS.seq_len, impl,
                                 flags.FLAGS.documents)), flush=True)


if __name__ == "__main__":
    from absl import app, flags
    from ml_collections import config_flags
    config_flags.DEFINE_config_file("config", "experiments/modernbert_base.py",
                                    "experiment file; its model config is measured")
    flags.DEFINE_integer("num_layers", 0, "override model.num_layers (0: keep)")
    flags.DEFINE_string("dtype", "", "override model.dtype (empty: keep)")
    flags.DEFINE_integer("seq_len", 2048, "tokens per packed row")
    flags.DEFINE_integer("batch_size", 1, "rows")
    flags.DEFINE_integer("documents", 4, "documents per packed row")
    flags.DEFINE_list("impls", ["xla", "splash"], "attention backends to compare")
    app.run(main)
