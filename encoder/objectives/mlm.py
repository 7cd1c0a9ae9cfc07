"""Masked language modeling (Devlin et al. 2019): cross-entropy at masked slots only.

L_MLM = -sum_p w_p log softmax(z_p)[y_p] / sum_p w_p over the gathered
prediction slots p (weights w mark real predictions). An optional NSP/SOP
loss on the pooled [CLS] vector is added for BERT and ALBERT recipes.
"""
import jax
import jax.numpy as jnp

from encoder.objectives import masking


def masked_cross_entropy(logits, labels, weights):
    """logits [B, P, V] (float32), labels [B, P], weights [B, P] -> (mean loss, stats)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    total = jnp.maximum(jnp.sum(weights), 1.0)
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return jnp.sum(nll * weights) / total, {
        "loss": jnp.sum(nll * weights) / total,
        "accuracy": jnp.sum(correct * weights) / total,
        "count": jnp.sum(weights),
    }


def corrupt_batch(rng, batch, ctx):
    """Applies the configured corruption to a batch on device."""
    m = ctx.config.masking
    return masking.corrupt(
        rng, batch["input_ids"], batch["attention_mask"], rate=m.rate,
        max_predictions=ctx.max_predictions, mask_id=ctx.mask_id,
        vocab_size=ctx.config.model.vocab_size, special_ids=ctx.special_ids, mode=m.mode,
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
