"""Masked language modeling (Devlin et al. 2019): cross-entropy at masked slots only.

L_MLM = -sum_p w_p log softmax(z_p)[y_p] / sum_p w_p over the gathered
prediction slots p (weights w mark real predictions). An optional NSP/SOP
loss on the pooled [CLS] vector is added for BERT and ALBERT recipes.
"""
import jax
import jax.numpy as jnp

from encoder.model import flops, heads
from encoder.objectives import masking


def masked_cross_entropy(logits, labels, weights):
    """logits [B, P, V] (float32), labels [B, P], weights [B, P] -> (mean loss, stats).

    nll = logsumexp(z) - z[y], with z[y] read through a one-hot select rather
    than a gather: on CPU the gather's transpose (a scatter into a [B, P, V]
    buffer) and an argmax for the accuracy cost ~10% of a small model's step
    (BUILD_NOTES.md). A slot is correct when its label's logit is the maximum.
    """
    logits = logits.astype(jnp.float32)
    top = jnp.max(logits, axis=-1, keepdims=True)
    lse = jnp.log(jnp.sum(jnp.exp(logits - jax.lax.stop_gradient(top)), axis=-1)) + \
        jax.lax.stop_gradient(top[..., 0])
    is_label = labels[..., None] == jnp.arange(logits.shape[-1], dtype=labels.dtype)
    label_logit = jnp.sum(jnp.where(is_label, logits, 0.0), axis=-1)
    nll = lse - label_logit
    total = jnp.maximum(jnp.sum(weights), 1.0)
    correct = (label_logit >= top[..., 0]).astype(jnp.float32)
    loss = jnp.sum(nll * weights) / total
    return loss, {"loss": loss, "accuracy": jnp.sum(correct * weights) / total,
                  "count": jnp.sum(weights)}


def corrupt_batch(rng, batch, ctx):
    """Applies the configured corruption to a batch on device."""
    m = ctx.config.masking
    return masking.corrupt(
        rng, batch["input_ids"], batch["attention_mask"], rate=m.rate,
        max_predictions=ctx.max_predictions, mask_id=ctx.mask_id,
        # random replacements from the tokenizer's ids only, never a padding row
        vocab_size=heads.real_vocab_size(ctx.config.model), special_ids=ctx.special_ids,
        mode=m.mode,
        word_start_table=ctx.word_start_table, mask_prob=m.mask_prob,
        random_prob=m.random_prob, span_p=m.span_p)


def prepare(batch, rng, ctx):
    """Adds the corruption to a batch: corrupted_ids and the prediction slots.

    Done once per step on the whole batch, before any micro-batching, so that
    gradient accumulation sees the same masks as one large batch would.
    """
    c = corrupt_batch(rng, batch, ctx)
    return {**batch, "corrupted_ids": c["input_ids"], "mlm_positions": c["mlm_positions"],
            "mlm_labels": c["mlm_labels"], "mlm_weights": c["mlm_weights"]}


def model_inputs(batch, ctx):
    """The encoder's keyword inputs from a batch (document mask if configured)."""
    return dict(segment_ids=batch.get("segment_ids"), attention_mask=batch["attention_mask"],
                positions=batch.get("positions"),
                document_ids=batch.get("document_ids") if ctx.config.data.document_mask else None)


def loss_fn(params, batch, rng, ctx, deterministic=False):
    """Returns (loss, metrics) for one prepared batch; rng drives dropout."""
    c = batch
    out, _ = ctx.model.apply(
        {"params": params}, c["corrupted_ids"], mlm_positions=c["mlm_positions"],
        deterministic=deterministic, rngs={"dropout": rng}, **model_inputs(batch, ctx))
    loss, stats = masked_cross_entropy(out["mlm_logits"], c["mlm_labels"], c["mlm_weights"])
    metrics = {"mlm_loss": stats["loss"], "mlm_accuracy": stats["accuracy"],
               "mlm_baseline_accuracy": jnp.sum(
                   (c["mlm_labels"] == ctx.most_frequent_id) * c["mlm_weights"])
               / jnp.maximum(stats["count"], 1.0)}
    if "pair_logits" in out:
        labels = batch["pair_labels"]
        logp = jax.nn.log_softmax(out["pair_logits"])
        pair_loss = -jnp.mean(jnp.take_along_axis(logp, labels[:, None], -1))
        metrics["pair_loss"] = pair_loss
        metrics["pair_accuracy"] = jnp.mean(jnp.argmax(logp, -1) == labels)
        loss = loss + pair_loss
    metrics["loss"] = loss
    return loss, metrics


def forward_flops(config, batch_size: int, seq_len: int, predictions_per_row: int) -> float:
    """The encoder on every token, the MLM head on the prediction slots."""
    m = config.model
    return (batch_size * seq_len * flops.encoder_flops_per_token(m, seq_len)
            + batch_size * predictions_per_row * flops.mlm_head_flops(m))


def summary(result: dict) -> list[str]:
    """The held-out masked-token accuracy beside the most-frequent-token baseline."""
    if "eval/mlm_accuracy" not in result or "eval/mlm_baseline_accuracy" not in result:
        return []
    return [f"held-out masked-token accuracy {result['eval/mlm_accuracy']:.3f} vs. "
            f"most-frequent-token baseline {result['eval/mlm_baseline_accuracy']:.3f}"]
