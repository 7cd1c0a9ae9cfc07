"""Sentence embeddings from positive pairs (and mined hard negatives): a retriever.

Examples: {"text_a", "text_b"} positive pairs, optionally with "negatives": [texts]
(what `python -m encoder mine` writes), or scored rows {"query" (or "text_a"),
"passages": [texts], "scores": [a teacher's score per passage]} (the first passage is
the positive; `encoder mine --scores` writes them; "text_b" + "negatives" + "scores"
with 1 + K scores reads the same), from a JSONL file or, at any size, from
a prepared pair corpus (`python -m encoder prepare --records=pairs`, encoder/data/
pairs.py) given as data.train_file. The loss is the in-batch softmax of
each query over every positive and every negative of the global batch
(encoder/retrieval/losses.py: every device's passages, duplicates masked), with
options read from the config's `contrastive` block (encoder/finetune/config.py; run as
`experiments/finetune.py:task=contrastive`):

  temperature 0.05 | learn_temperature   fixed 1/0.05 = 20 (Sentence-BERT's MNRL scale),
                                         or a learned log scale (CLIP's, clamped at 100)
  symmetric                              + passage -> query direction (averaged)
  query_prefix, passage_prefix           E5/Nomic-style task prefixes ("query: ")
  matryoshka_dims "256,128,64"           the loss at each nested prefix (summed)
  cache_chunk                            > 0: the cached (GradCache) embedding, that many
                                         rows at a time (encoder/retrieval/model.py)
  num_negatives                          hard negatives per row (0: the file's most;
                                         rows with fewer are masked)
  head "dense" | "colbert", colbert_dim  a ColBERT late-interaction head (MaxSim)
  mask_duplicates                        identical texts are no negatives of each other
  loss "in_batch" | "margin_mse" | "kl"  labels only, or the teacher's scores
                                         (encoder/retrieval/distill.py), plus
  in_batch_weight                        x the in-batch loss beside a distillation loss
  distill_temperature, distill_normalize kl's T (x T^2); none | minmax per row
  head "sparse"                          SPLADE over the MLM head (encoder/retrieval/
                                         sparse.py): dot-product logits (no temperature),
  sparse_query expand | terms            query-side expansion or the query's own ids,
  sparse_regularizer flops | l1,         each side's weight, ramped quadratically over
  flops_{query,doc}_weight,              flops_warmup_steps (the batch's train_step)
  flops_warmup_steps, sparse_top_terms   (index: each document's largest terms kept)

Without a `contrastive` block (experiments/finetune.py:task=contrastive) the defaults
hold: fixed scale 20, dense head, no negatives. Scored by retrieving each text_b among
the split's distinct text_b: recall@1, MRR@10 and nDCG@10 (and nDCG@10 at each
Matryoshka dim). Exported as the bare encoder (its embeddings are the model).
"""
import os

import jax
import jax.numpy as jnp
import numpy as np

from encoder.data import pairs, shards
from encoder.retrieval import colbert as colbert_lib, distill, losses, model as retrieval_model
from encoder.retrieval import sparse as sparse_lib
from encoder.retrieval.options import SCALE, Options, options  # noqa: F401 (SCALE: tests)
from encoder.tasks import files
from encoder.tasks.base import Task, TaskDataError

def featurize_pairs(examples, tokenizer, max_len: int) -> dict:
    """Two single-text encodings per example: a_* and b_* arrays."""
    out = {f"a_{k}": v for k, v in files.encode_texts(
        [{"text": ex["text_a"]} for ex in examples], tokenizer, max_len).items()}
    out.update({f"b_{k}": v for k, v in files.encode_texts(
        [{"text": ex["text_b"]} for ex in examples], tokenizer, max_len).items()})
    return out


class Contrastive(Task):
    name = "contrastive"
    primary_metric = "recall_at_1"
    model_cls = retrieval_model.Retriever
    # scored rows (query or text_a, passages, scores) or pairs; a line holding none of
    # them is refused naming the last set's missing field
    fields = (("query", "passages"), ("text_a", "passages"), ("text_a", "text_b"))
    metric_keys = ("recall_at_1", "mrr_at_10", "ndcg_at_10")
    default_metrics = ("recall_at_1",)

    def __init__(self, config, tokenizer, labels=None):
        super().__init__(config, tokenizer, labels)
        self.options = options(config)

    @classmethod
    def check_line(cls, example: dict, where: str) -> None:
        """Checks a line and reads a scored row's passages as text_b (the first) and
        negatives (the rest), its query as text_a, in place."""
        negs = example.get("negatives", [])
        if not isinstance(negs, list) or not all(isinstance(x, str) for x in negs):
            raise TaskDataError(f"{where}: 'negatives' must be a list of strings, got "
                                f"{files.json_kind(negs)}")
        why = pairs.read_row(example)  # the scored form, the scores: the prepared path's check
        if why:
            raise TaskDataError(f"{where}: {why}")
        files.check_texts(example, where)

    def training_source(self, path):
        """A prepared pair corpus (a folder: encoder/data/pairs.py) as training rows, read
        by random access at any size; the prefixes it was tokenized with must be the run's."""
        if not os.path.isdir(path):
            return None
        corpus = shards.PreparedCorpus(path)  # an unfinished prepare is named here
        o, m = self.options, corpus.manifest
        baked = (m.get("query_prefix", ""), m.get("passage_prefix", ""))
        if corpus.records == "pairs" and baked != (o.query_prefix, o.passage_prefix):
            raise TaskDataError(
                f"{path} was prepared with query_prefix={baked[0]!r} passage_prefix="
                f"{baked[1]!r}, but this run asks for {o.query_prefix!r} and "
                f"{o.passage_prefix!r}: give the corpus's prefixes, or prepare it again")
        rows = pairs.PairRows(corpus, self.tokenizer, self.config.data.max_seq_len,
                              o.num_negatives, scores=o.loss != "in_batch")
        rows.train_step = o.head == "sparse" and bool(o.flops_warmup_steps)  # as featurize
        if o.loss != "in_batch":
            unscored = rows.unscored()
            if unscored:
                raise TaskDataError(
                    f"{path}: contrastive.loss={o.loss} reads a teacher score per passage, "
                    f"but {unscored} of its {len(rows)} training rows have none: prepare it "
                    "from scored rows ({\"query\", \"passages\", \"scores\"}) or train "
                    "with contrastive.loss=in_batch")
        return rows

    # ------------------------------------------------------------- features
    def featurize(self, examples):
        """a_* (queries, query prefix), b_* (positives, passage prefix) and, for a training
        file with negatives, n_* [N, K, T] and n_mask [N, K]; text ids for the duplicate
        masks (one id space over every text of the split)."""
        o, max_len = self.options, self.config.data.max_seq_len
        ids: dict = {}
        text_id = lambda t: ids.setdefault(t, len(ids))  # noqa: E731
        out = {f"a_{k}": v for k, v in files.encode_texts(
            [{"text": o.query_prefix + ex["text_a"]} for ex in examples], self.tokenizer,
            max_len).items()}
        out.update({f"b_{k}": v for k, v in files.encode_texts(
            [{"text": o.passage_prefix + ex["text_b"]} for ex in examples], self.tokenizer,
            max_len).items()})
        # a and b share one id space: a query identical to a passage is the same text
        out["a_text_id"] = np.asarray([text_id(ex["text_a"]) for ex in examples], np.int32)
        out["b_text_id"] = np.asarray([text_id(ex["text_b"]) for ex in examples], np.int32)
        counts = [len(ex.get("negatives", [])) for ex in examples]
        k = o.num_negatives or max(counts, default=0)
        if k and any(counts):
            n = len(examples)
            texts = [(ex.get("negatives", []) + [""] * k)[:k] for ex in examples]
            flat = files.encode_texts([{"text": o.passage_prefix + t} for row in texts
                                       for t in row], self.tokenizer, max_len)
            for key, v in flat.items():
                out[f"n_{key}"] = v.reshape(n, k, -1)
            out["n_mask"] = np.asarray([[1 if j < c else 0 for j in range(k)]
                                        for c in counts], np.int32)
            out["n_text_id"] = np.asarray([[text_id(t) if j < c else -1
                                            for j, t in enumerate(row)]
                                           for row, c in zip(texts, counts)], np.int32)
        scores = teacher_scores(examples, k) if o.loss != "in_batch" else None
        if scores is not None:
            out["scores"] = scores
        if o.head == "sparse" and o.flops_warmup_steps:
            out["train_step"] = np.zeros(len(examples), np.int32)  # the trainer fills it in
        return out, None

    # ---------------------------------------------------------------- model
    def model(self, model_cfg, pooling: str):
        o = self.options
        return retrieval_model.Retriever(model_cfg, 0, pooling, o.learn_temperature,
                                         o.temperature,
                                         o.colbert_dim if o.head == "colbert" else 0,
                                         sparse=o.head == "sparse")

    def forward(self, model, params, batch, deterministic=True, rngs=None):
        """{"a": query out, "b": positive out, "n": negatives' out [B, K, ...] (a training
        batch with negatives), "log_scale": the learned log scale, repeated [B]}; each out is the
        Retriever's {"pooled", "tokens"}.

        Every side goes through the encoder in one call: row i's query, positive and
        negatives stacked as [B, 2 + K, T] and flattened batch-major (each device keeps its
        own rows under the batch sharding), so the program holds one copy of the encoder
        (and, under cache_chunk, one checkpointed map) instead of one per side (the MiniLM
        mining e2e test: 27.0 -> 18.6 s, BUILD_NOTES). One dropout key serves all the rows."""
        chunk = 0 if deterministic else self.options.cache_chunk
        rng = (rngs or {}).get("dropout")
        sides = ["a", "b"] + (["n"] if "n_input_ids" in batch else [])
        b = batch["a_input_ids"].shape[0]
        per_row = [batch[f"{s}_input_ids"].shape[1] if s == "n" else 1 for s in sides]
        lengths = {batch[f"{s}_input_ids"].shape[-1] for s in sides}
        if len(lengths) > 1:
            raise ValueError(f"contrastive sides of different lengths {sorted(lengths)}: "
                             "queries, positives and negatives are padded to one max_seq_len")

        def stacked(field):
            parts = [batch[f"{s}_{field}"] for s in sides]
            parts = [x.reshape(b, -1, x.shape[-1]) for x in parts]  # [B, k_side, T]
            return jnp.concatenate(parts, axis=1).reshape(-1, parts[0].shape[-1])

        out = retrieval_model.embed(model, params, stacked("input_ids"), stacked("segment_ids"),
                                    stacked("attention_mask"), deterministic, rng, chunk)
        out = jax.tree.map(lambda y: y.reshape(b, sum(per_row), *y.shape[1:]), out)
        result, start = {}, 0
        for s, k in zip(sides, per_row):
            part = jax.tree.map(lambda y: y[:, start:start + k], out)
            if s != "n":
                part = jax.tree.map(lambda y: y[:, 0], part)
            result[s] = {**part, "mask": batch[f"{s}_attention_mask"]}
            start += k
        if "sparse" in result["a"]:  # the query side's option (no expansion: its own ids)
            result["a"]["sparse"] = sparse_lib.query_weights(
                result["a"]["sparse"], batch["a_input_ids"], batch["a_attention_mask"],
                self.options.sparse_query)
        if "logit_scale" in params:  # batch-major like every output (inference.predict)
            result["log_scale"] = jnp.broadcast_to(params["logit_scale"], (b,))
        return result

    def loss(self, out, batch):
        """Matryoshka-summed in-batch ranking loss (dense), or the MaxSim one (ColBERT); with
        contrastive.loss margin_mse | kl, the distillation loss on the teacher's scores
        (plus in_batch_weight x the ranking loss)."""
        o = options(self.config) if self is not None else Options()
        w = batch["weight"]
        if isinstance(out, tuple):  # (a, b) unit vectors as they are: one batch's plain MNRL
            return losses.in_batch_loss(out[0], out[1], w, 1.0 / o.temperature)
        log_scale = out.get("log_scale")
        scale = losses.scale_of(None if log_scale is None else log_scale[0], o.temperature)
        ids = {}
        if o.mask_duplicates and "a_text_id" in batch:
            ids = dict(q_ids=batch["a_text_id"], p_ids=batch["b_text_id"],
                       n_ids=batch.get("n_text_id"))
        neg = out.get("n")
        n_mask = batch.get("n_mask")

        distilled = o.loss != "in_batch"
        ranking = 1.0 if not distilled else o.in_batch_weight

        def combined(q, p, n, in_batch, pair_scores):
            """ranking x the in-batch loss + the distillation loss on [B, 1 + K] scores."""
            total = ranking * in_batch() if ranking else 0.0
            if distilled:
                total = total + self.distillation(q, p, n, batch, scale, pair_scores, o)
            return total

        def at(q, p, n):
            return combined(q, p, n, lambda: losses.in_batch_loss(
                q, p, w, scale, n, n_mask, symmetric=o.symmetric, **ids),
                distill.dense_pair_scores)

        if o.head == "sparse":  # SPLADE: dot products of the weights are the logits
            q, p = out["a"]["sparse"], out["b"]["sparse"]
            n = None if neg is None else neg["sparse"]
            total = combined(q, p, n, lambda: losses.in_batch_loss(
                q, p, w, 1.0, n, n_mask, symmetric=o.symmetric, **ids),
                distill.dense_pair_scores)
            if o.flops_warmup_steps and "train_step" not in batch:
                raise ValueError("contrastive.flops_warmup_steps needs the batch's train_step "
                                 "(featurize adds it; the trainer's step fills it in)")
            return total + self.sparse_regularization(q, p, n, batch, o)
        if o.head == "colbert":
            tok = lambda s: (s["tokens"], s["mask"])  # noqa: E731
            q, p = tok(out["a"]), tok(out["b"])
            n = tok(neg) if neg is not None else None
            return combined(q, p, n, lambda: losses.in_batch_loss(
                q, p, w, scale, n, n_mask, symmetric=o.symmetric,
                score=colbert_lib.maxsim_scores, **ids), distill.colbert_pair_scores)
        total, _ = losses.matryoshka_loss(at, out["a"]["pooled"], out["b"]["pooled"],
                                          None if neg is None else neg["pooled"],
                                          o.matryoshka_dims)
        return total

    @staticmethod
    def sparse_regularization(q, p, n, batch, o: Options):
        """SPLADE's regulariser on the queries and on the documents (positives and
        negatives), each with its weight, ramped by the batch's train step."""
        w = batch["weight"]
        docs, d_weight = p, w
        if n is not None:
            docs = jnp.concatenate([p, n.reshape(-1, n.shape[-1])], 0)
            d_weight = jnp.concatenate([w, (batch["n_mask"] * (w[:, None] > 0)).reshape(-1)
                                        .astype(w.dtype)])
        step = batch["train_step"][0] if "train_step" in batch else 0
        return sparse_lib.regularization(q, docs, w, d_weight, o.sparse_regularizer,
                                         o.flops_query_weight, o.flops_doc_weight, step,
                                         o.flops_warmup_steps)

    @staticmethod
    def distillation(q, p, n, batch, scale, pair_scores, o: Options):
        """The distillation loss of the student's [B, 1 + K] logits (scale x similarity of
        each query with its positive and negatives) against batch["scores"]."""
        if n is None or "scores" not in batch:
            raise ValueError(f"contrastive.loss={o.loss} reads a teacher score per passage: "
                             "the training rows need negatives and 'scores' ({\"query\", "
                             "\"passages\", \"scores\"}); these have none")
        # each query's passages as [B, 1 + K, ...]: the positive first, then its negatives
        docs = jax.tree.map(lambda a, m: jnp.concatenate([a[:, None], m], 1), p, n)
        student = scale * pair_scores(q, docs)                                 # [B, 1 + K]
        mask = jnp.concatenate([jnp.ones_like(batch["n_mask"][:, :1]), batch["n_mask"]], 1)
        return distill.distill_loss(o.loss, student, batch["scores"], mask, batch["weight"],
                                    o.distill_temperature, o.distill_normalize)

    # ---------------------------------------------------------------- score
    def score(self, out, examples, arrays, meta):
        """Retrieves each text_b among the split's distinct text_b (at each Matryoshka dim)."""
        a, b = np.asarray(out["a"]["pooled"]), np.asarray(out["b"]["pooled"])
        texts = [ex["text_b"] for ex in examples]
        first = {}
        for i, t in enumerate(texts):
            first.setdefault(t, i)
        cand = np.asarray(sorted(first.values()))                 # distinct positives
        gold = np.searchsorted(cand, [first[t] for t in texts])   # [N] column of each row's own
        if self.options.head == "sparse":
            sa, sb = np.asarray(out["a"]["sparse"]), np.asarray(out["b"]["sparse"])
            metrics, nearest = _rank_metrics(sa @ sb[cand].T, gold)
        elif self.options.head == "colbert":
            sims = np.asarray(colbert_lib.maxsim_scores(
                (out["a"]["tokens"], arrays["a_attention_mask"]),
                (out["b"]["tokens"][cand], arrays["b_attention_mask"][cand])))
            metrics, nearest = _rank_metrics(sims, gold)
        else:
            dims = self.options.matryoshka_dims or (a.shape[-1],)
            metrics, nearest = {}, None
            for d in sorted(set(dims) | {a.shape[-1]}, reverse=True):
                qa, pb = _unit(a[:, :d]), _unit(b[cand, :d])
                m, near = _rank_metrics(qa @ pb.T, gold)
                if d == a.shape[-1]:
                    metrics.update(m)
                    nearest = near
                else:
                    metrics[f"ndcg_at_10_dim{d}"] = m["ndcg_at_10"]
        preds = [{"nearest": int(cand[j])} for j in nearest]
        return metrics, preds


def _unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def teacher_scores(examples: list, k: int) -> np.ndarray | None:
    """[N, 1 + k] float32: each row's scores (the positive's, then its first k negatives'),
    0 in the slots of missing negatives (n_mask masks them); None when no row has scores
    or a negative (a dev split of plain pairs: the loss refuses such a training batch).
    Some rows scored and others not is refused, naming the first unscored row."""
    have = [ex.get("scores") is not None for ex in examples]
    if not any(have) or not k:
        return None
    if not all(have):
        ex = examples[have.index(False)]
        raise TaskDataError(f"{ex.get('_where', 'a row')}: no 'scores', while other rows of "
                            f"the file have a teacher score per passage ({have.count(False)} "
                            f"of {len(examples)} rows have none)")
    out = np.zeros((len(examples), 1 + k), np.float32)
    for i, ex in enumerate(examples):
        s = ex["scores"][:1 + k]
        out[i, :len(s)] = s
    return out


def _rank_metrics(sims, gold):
    """recall@1, MRR@10, nDCG@10 with one relevant column per row (gold [N])."""
    own = sims[np.arange(len(gold)), gold]
    rank = np.sum(sims > own[:, None], axis=1)  # 0-based; ties resolved in the query's favour
    in10 = rank < 10
    return {"recall_at_1": float(np.mean(rank == 0)),
            "mrr_at_10": float(np.mean(np.where(in10, 1.0 / (rank + 1), 0.0))),
            "ndcg_at_10": float(np.mean(np.where(in10, 1.0 / np.log2(rank + 2), 0.0)))}, \
        np.argmax(sims, axis=1)
