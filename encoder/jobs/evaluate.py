"""Intrinsic evaluation and sentence embeddings (the `evaluate` and `embed` modes).

evaluate: held-out MLM loss and accuracy (next to the most-frequent-token
  baseline) and pseudo-perplexity of a pretrained model, on the run's
  validation split or --config.data.valid_files; writes WORKDIR/eval.json.
embed: L2-normalised sentence vectors (pooling from the config) for every
  line of --config.data.input_file, saved as WORKDIR/embeddings.npy, with an
  optional nearest-neighbour query (--config.eval.query).
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from encoder import config as config_lib
from encoder.checkpoints import sources
from encoder.data import pipeline
from encoder.eval import pseudo_perplexity
from encoder.eval.embeddings import embed_texts, nearest
from encoder.model import models
from encoder.objectives import pretraining
from encoder.train import metrics_io


def embed(config, workdir: str) -> dict:
    if not config.data.input_file:
        raise ValueError("embed needs --config.data.input_file (one text per line)")
    p = sources.load(config.init_from)
    # Before compiling: a length past a learned/sinusoidal table would read NaN rows.
    models.validate_config(p.model_cfg, config.data.max_seq_len)
    with open(config.data.input_file, encoding="utf-8", errors="replace") as f:
        texts = [line.strip() for line in f if line.strip()]
    if not texts:
        raise ValueError(f"{config.data.input_file}: no text")
    vecs = embed_texts(p.model_cfg, p.params, p.tokenizer, texts, config.pooling,
                       config.data.max_seq_len, config.eval.batch_size)
    os.makedirs(workdir, exist_ok=True)
    np.save(os.path.join(workdir, "embeddings.npy"), vecs)
    with open(os.path.join(workdir, "texts.jsonl"), "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    result = {"texts": len(texts), "dim": int(vecs.shape[1]),
              "path": os.path.join(workdir, "embeddings.npy")}
    if config.eval.query:
        q = embed_texts(p.model_cfg, p.params, p.tokenizer, [config.eval.query], config.pooling,
                        config.data.max_seq_len, 1)
        idx, scores = nearest(vecs, q, config.eval.top_k)
        result["neighbours"] = [{"text": texts[i], "cosine": float(s)}
                                for i, s in zip(idx[0], scores[0])]
    return result


def evaluate(config, workdir: str) -> dict:
    """Held-out MLM metrics and pseudo-perplexity of a pretrained MLM model."""
    p = sources.load(config.init_from)
    # Before compiling: a length past a learned/sinusoidal table would read NaN rows.
    models.validate_config(p.model_cfg, config.data.seq_len)
    if "mlm_head" not in p.params:
        raise ValueError(f"{config.init_from}: no MLM head in the checkpoint; evaluate needs an "
                         "MLM-pretrained model (for ELECTRA, the generator is the MLM)")
    run = p.run_config.copy_and_resolve_references() if p.run_config is not None else None
    if run is None:  # an HF BertForMaskedLM folder
        run = config_lib.base_config()
        run.model = p.model_cfg
        run.data.document_mask = False
    run.data.seq_len = config.data.seq_len
    source = pipeline.held_out_rows(run.data, p.tokenizer, config.data.valid_files)
    if source is None:
        raise ValueError("no validation documents to evaluate on: give "
                         "--config.data.valid_files")
    budget = max(1, config.eval.max_tokens // run.data.seq_len)
    rows = pipeline.as_source(source).read_batch(np.arange(min(budget, len(source))))
    counts = np.bincount(rows["input_ids"][rows["attention_mask"].astype(bool)],
                         minlength=p.tokenizer.vocab_size)
    run.objective = "mlm"
    step = pretraining.build(run, p.tokenizer, pretraining.most_frequent_token(
        counts, p.tokenizer.special_ids))
    params = {k: v for k, v in p.params.items() if k in ("encoder", "mlm_head")}
    eval_batch = jax.jit(lambda batch, rng: step.eval_step(params, batch, rng))

    totals, n = {}, 0
    bs = config.eval.batch_size
    for i in range(0, len(rows["input_ids"]) - bs + 1, bs) or [0]:
        batch = {k: jnp.asarray(v[i:i + bs]) for k, v in rows.items()}
        m = jax.device_get(eval_batch(batch, jax.random.key(config.eval.masking_seed + i)))
        for k in ("mlm_loss", "mlm_accuracy", "mlm_baseline_accuracy"):
            totals[k] = totals.get(k, 0.0) + float(m[k])
        n += 1
    result = {f"eval/{k}": v / n for k, v in totals.items()}

    model = step.ctx.model

    def apply_fn(ids, seg, mask, pos):
        # Each packed row is scored as one context (no document mask): a known
        # approximation for rows that pack several documents.
        out, _ = model.apply({"params": params}, ids, seg, mask, mlm_positions=pos)
        return out["mlm_logits"]
    lp = pseudo_perplexity.token_log_probs(apply_fn, rows["input_ids"], rows["attention_mask"],
                                           p.tokenizer.special_ids, p.tokenizer.mask_id,
                                           config.eval.batch_size, rows["segment_ids"],
                                           max_tokens=config.eval.max_tokens)
    result["eval/pseudo_perplexity"] = pseudo_perplexity.pseudo_perplexity(lp)
    result["eval/pppl_tokens"] = int(len(lp))
    os.makedirs(workdir, exist_ok=True)
    metrics_io.write_json(os.path.join(workdir, "eval.json"), result)
    return result


MODES = {"evaluate": evaluate, "embed": embed}
