"""Intrinsic evaluation and sentence embeddings (the `evaluate` and `embed` modes).

evaluate: held-out MLM loss and accuracy (next to the most-frequent-token
  baseline) and pseudo-perplexity of a pretrained model, on the run's
  validation split or --config.data.valid_files, under one protocol whatever the
  source's kind (`protocol`: masking, seq_len, document mask, seed; the config's
  eval.* fields, else BERT's); writes WORKDIR/eval.json with the protocol, the
  checkpoint's identity (step, content hash) and the data's.
embed: L2-normalised sentence vectors (pooling from the config) for every
  line of --config.data.input_file, saved as WORKDIR/embeddings.npy, with an
  optional nearest-neighbour query (--config.eval.query).
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from encoder import errors, config as config_lib, ranges
from encoder.checkpoints import sources
from encoder.data import pipeline
from encoder.eval import evaluators, identity, pseudo_perplexity
from encoder.eval.embeddings import embed_texts, nearest
from encoder.model import models
from encoder.objectives import pretraining
from encoder.train import metrics_io


def _own_output(workdir: str, kind: str) -> None:
    """The output folder is new, empty or this job's own earlier output (never a user's
    folder, a run's workdir or an HF export: encoder/errors.py)."""
    errors.check_output(workdir, kind, "--workdir")  # marked when the result is written


def embed(config, workdir: str) -> dict:
    ranges.check(config)  # every number in its range, first (encoder/ranges.py)
    if not config.data.input_file:
        raise ValueError("embed needs --config.data.input_file (one text per line)")
    models.validate_pooling(config.pooling)
    from encoder.tasks import files
    texts = [line.strip() for _, line in files.text_lines(config.data.input_file)
             if line.strip()]  # not UTF-8: refused naming file:line, before the model
    _own_output(workdir, "embed")  # before the model is read
    p = sources.load(config.init_from)
    # Before compiling: a length past a learned/sinusoidal table would read NaN rows.
    models.validate_config(p.model_cfg, config.data.max_seq_len)
    if not texts:
        raise ValueError(f"{config.data.input_file}: no text")
    vecs = embed_texts(p.model_cfg, p.params, p.tokenizer, texts, config.pooling,
                       config.data.max_seq_len, config.eval.batch_size)
    errors.mark_output(workdir, "embed")
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


# The held-out protocol: what is masked and how rows are read, the same whatever kind of
# source the model came in (once a workdir brought its own objective settings, e.g.
# ModernBERT's 30% masking, a params folder BERT's; one model's parameters scored MLM
# accuracy 0.0158 as a workdir and 0.0176 as the params folder averaged from it). BERT's
# corruption (Devlin et al. 2019 §3.1) unless the config's eval.masking says otherwise.
DEFAULT_MASKING = {"mode": "token", "rate": 0.15, "mask_prob": 0.8, "random_prob": 0.1,
                   "span_p": 0.2}
PPPL_RULE = ("Salazar et al. 2020: every real token masked alone and scored in its packed "
             "row (document mask as for MLM), the first max_tokens tokens")


def protocol(config) -> dict:
    """The evaluation protocol from the evaluate config alone (never from the source):
    masking (eval.masking.{mode, rate, mask_prob, random_prob, span_p}), row length
    (data.seq_len), document mask and restarted positions (eval.document_mask,
    eval.restart_positions), the corruption seed, the token budget and batch size. Fields
    the config lacks take the defaults above; eval.json records the result."""
    ev = config.eval
    given = ev.get("masking", None)
    given = given.to_dict() if hasattr(given, "to_dict") else dict(given or {})
    unknown = sorted(set(given) - set(DEFAULT_MASKING))
    if unknown:
        raise ValueError(f"eval.masking: unknown field(s) {unknown}; valid: "
                         f"{sorted(DEFAULT_MASKING)}")
    masking = {**DEFAULT_MASKING, **given}
    from encoder.objectives import masking as masking_lib
    if masking["mode"] not in masking_lib.MASKING_MODES:
        raise ValueError(f"eval.masking.mode={masking['mode']!r}; valid names: "
                         f"{sorted(masking_lib.MASKING_MODES)}")
    if not 0.0 < float(masking["rate"]) < 1.0:
        raise ValueError(f"eval.masking.rate={masking['rate']}: expected a share in (0, 1)")
    return {"objective": "mlm", "masking": masking, "seq_len": int(config.data.seq_len),
            "document_mask": bool(ev.get("document_mask", True)),
            "restart_positions": bool(ev.get("restart_positions", False)),
            "seed": int(ev.masking_seed), "max_tokens": int(ev.max_tokens),
            "batch_size": int(ev.batch_size), "pseudo_perplexity": PPPL_RULE}


def _eval_run_config(model_cfg, proto: dict):
    """A pretraining config for the MLM eval step: the model, the protocol, nothing else."""
    run = config_lib.base_config()
    run.model = model_cfg
    run.objective = "mlm"
    run.masking.update(proto["masking"])
    run.data.update(seq_len=proto["seq_len"], document_mask=proto["document_mask"],
                    restart_positions=proto["restart_positions"])
    return run


def _held_out(config, p, proto: dict):
    """(rows, what they are) for the protocol: --config.data.valid_files read the one way
    for every source, else (a workdir) its own validation split."""
    spec = config.data.valid_files
    if spec:
        data_cfg = _eval_run_config(p.model_cfg, proto).data
        data_cfg.valid_files = spec
        _refuse_trained_on(config, p.tokenizer, data_cfg)
        return pipeline.held_out_rows(data_cfg, p.tokenizer, spec), {
            "valid_files": identity.corpus_identity(spec)}
    if p.run_config is None:
        return None, {}
    data_cfg = p.run_config.data.copy_and_resolve_references()  # where its split lies
    data_cfg.update(seq_len=proto["seq_len"], restart_positions=proto["restart_positions"])
    split = data_cfg.valid_files or data_cfg.train_files or "stdlib"
    source = sources.split_step(config.init_from)[0]  # a mixture's split: its cache there
    return pipeline.held_out_rows(data_cfg, p.tokenizer, workdir=source), {
        "held_out": "the source run's validation split" if data_cfg.valid_files else
        f"the source run's held-out share ({data_cfg.valid_fraction:g}) of its corpus",
        "corpus": identity.corpus_identity(split)}


def _refuse_trained_on(config, tokenizer, data_cfg) -> None:
    """--config.data.valid_files against what the source run trained on (the prepared
    folders its data_order.json names), by content (encoder/data/overlap.py): a held-out
    figure of training documents is refused past the share it tolerates."""
    from encoder.data import corpus, overlap, shards
    source = sources.split_step(config.init_from)[0]
    order = pipeline.read_data_order(source) if os.path.isdir(source) else None
    folders = dict.fromkeys(s["folder"] for stream in (order or {}).get("streams", {}).values()
                            for s in stream.get("sources", []) if s.get("split") == "train")
    trained = [shards.PreparedCorpus(f) for f in folders if shards.is_prepared(f)]
    trained = [(c, "train") for c in trained
               if c.tokenizer_fingerprint == tokenizer.fingerprint()]
    if not trained:
        return
    spec, share = data_cfg.valid_files, config.data.get("max_held_out_overlap", 0.01)
    args = (f"--config.data.valid_files={spec}", f"what {source} trained on", share,
            "--config.data.max_held_out_overlap")
    if shards.is_prepared(spec):
        held = shards.PreparedCorpus(spec)
        overlap.check_prepared(trained, [(held, "valid" if held.documents("valid") else
                                          "train")], *args[:2], "", *args[2:])
        return
    docs = list(corpus.read_documents(corpus.expand_paths(spec), data_cfg.one_doc_per_line,
                                      data_cfg.max_line_chars))
    overlap.check_tokenized(docs, tokenizer, trained, *args)


def evaluate(config, workdir: str) -> dict:
    ranges.check(config)  # every number in its range, first (encoder/ranges.py)
    _own_output(workdir, "evaluate")  # before the model is read
    return _evaluate(config, workdir)


def _evaluate(config, workdir: str) -> dict:
    """Held-out MLM metrics and pseudo-perplexity of a pretrained MLM model, under one
    protocol (`protocol`), with what was scored: eval.json's protocol, checkpoint and data."""
    proto = protocol(config)
    scored = identity.source_identity(config.init_from)
    p = sources.load(config.init_from)
    # Before compiling: a length past a learned/sinusoidal table would read NaN rows.
    models.validate_config(p.model_cfg, proto["seq_len"])
    if "mlm_head" not in p.params:
        raise ValueError(f"{config.init_from}: no MLM head in the checkpoint; evaluate needs an "
                         "MLM-pretrained model (for ELECTRA, the generator is the MLM)")
    source, data = _held_out(config, p, proto)
    if source is None:
        given = config.data.get("valid_files", "")
        raise ValueError(f"no validation documents to evaluate on in --config.data.valid_files="
                         f"{given} (empty, or no document long enough for a row)" if given
                         else "no validation documents to evaluate on: give "
                         "--config.data.valid_files")
    source = pipeline.as_source(source)
    n = min(max(1, proto["max_tokens"] // proto["seq_len"]), len(source))
    rows = source.read_batch(np.arange(n))
    counts = np.bincount(rows["input_ids"][rows["attention_mask"].astype(bool)],
                         minlength=p.tokenizer.vocab_size)
    run = _eval_run_config(p.model_cfg, proto)
    step = pretraining.build(run, p.tokenizer, pretraining.most_frequent_token(
        counts, p.tokenizer.special_ids))
    params = {k: v for k, v in p.params.items() if k in ("encoder", "mlm_head")}
    bs = min(proto["batch_size"], n)
    # The trainer's held-out evaluator: fixed batches of the first rows in order, corruption
    # keys seed + i, per-batch metrics averaged.
    held_out = evaluators.HeldOut(
        jax.jit(step.eval_step), pipeline.Rows(rows), bs, n // bs,
        ("mlm_loss", "mlm_accuracy", "mlm_baseline_accuracy"),
        shard=lambda b: {k: jnp.asarray(v) for k, v in b.items()}, key_offset=proto["seed"])
    result = held_out(params, 0)

    model = step.ctx.model

    def apply_fn(ids, seg, mask, pos, document_ids=None, positions=None):
        out, _ = model.apply({"params": params}, ids, seg, mask, mlm_positions=pos,
                             positions=positions, document_ids=document_ids)
        return out["mlm_logits"]
    extra = {"positions": rows["positions"]} if "positions" in rows else {}
    if proto["document_mask"] and "document_ids" in rows:
        extra["document_ids"] = rows["document_ids"]
    lp = pseudo_perplexity.token_log_probs(apply_fn, rows["input_ids"], rows["attention_mask"],
                                           p.tokenizer.special_ids, p.tokenizer.mask_id,
                                           proto["batch_size"], rows["segment_ids"],
                                           max_tokens=proto["max_tokens"], extra=extra)
    result["eval/pseudo_perplexity"] = pseudo_perplexity.pseudo_perplexity(lp)
    result["eval/pppl_tokens"] = int(len(lp))
    result["eval/rows"] = int((n // bs) * bs)
    result.update(protocol=proto, checkpoint=scored, data=data)
    errors.mark_output(workdir, "evaluate")
    metrics_io.write_json(os.path.join(workdir, "eval.json"), result)
    return result


MODES = {"evaluate": evaluate, "embed": embed}
