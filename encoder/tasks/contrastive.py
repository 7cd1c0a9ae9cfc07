"""Sentence embeddings from positive pairs: in-batch negatives, recall@1 retrieval.

Examples: {"text_a", "text_b"} positive pairs. Exported as the bare encoder (its
embeddings are the model); no baseline and no probe.
"""
import jax
import jax.numpy as jnp
import numpy as np

from encoder.model import models
from encoder.tasks import files
from encoder.tasks.base import Task, TaskDataError

SCALE = 20.0  # inverse temperature on cosine similarities (Sentence-BERT's MNRL)


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
    model_cls = models.Embedder
    fields = (("text_a", "text_b"),)
    metric_keys = ("recall_at_1",)
    default_metrics = ("recall_at_1",)

    def check(self, examples, split):
        for ex in examples:
            for key in ("text_a", "text_b"):
                if not isinstance(ex[key], str):
                    raise TaskDataError(f"{ex['_where']}: {key!r} must be a string")

    def featurize(self, examples):
        return featurize_pairs(examples, self.tokenizer, self.config.data.max_seq_len), None

    def forward(self, model, params, batch, deterministic=True, rngs=None):
        def embed(side):
            out, _ = model.apply({"params": params}, batch[f"{side}_input_ids"],
                                 batch[f"{side}_segment_ids"], batch[f"{side}_attention_mask"],
                                 deterministic=deterministic, rngs=rngs or {})
            return out
        return embed("a"), embed("b")

    def loss(self, out, batch):
        """Multiple-negatives ranking (Henderson et al. 2017): in-batch softmax over b."""
        a, b = out
        scores = SCALE * (a @ b.T).astype(jnp.float32)  # [B, B]; vectors are unit length
        w = batch["weight"]
        scores = jnp.where(w[None, :] > 0, scores, -1e9)
        logp = jax.nn.log_softmax(scores, axis=-1)
        return -jnp.sum(jnp.diagonal(logp) * w) / jnp.maximum(jnp.sum(w), 1.0)

    def score(self, out, examples, arrays, meta):
        """Retrieves each text_b among all of the split's text_b."""
        a, b = out
        nearest = np.argmax(a @ b.T, axis=1)
        preds = [{"nearest": int(j)} for j in nearest]
        return {"recall_at_1": float(np.mean(nearest == np.arange(len(a))))}, preds
