"""ELECTRA's replaced-token detection (Clark et al. 2020).

A small generator (sharing the embeddings) is trained by MLM; its samples,
drawn with Gumbel noise and no gradient through the sample, replace the
masked tokens; the discriminator classifies every real token as original or
replaced. A sampled token equal to the original counts as original.
L = L_gen + λ L_disc (λ = electra.disc_weight, 50 in the paper).
"""
import jax
import jax.numpy as jnp

from encoder.model import flops
from encoder.objectives import mlm


def generator_config(cfg, fraction: float, layers: int = 0):
    """ELECTRA's generator: the discriminator's config at a fraction of its width, sized as
    ELECTRA's released code sizes it (run_pretraining.get_generator_config): width
    round(D x fraction), one head per 64 of it (at least one), the FFN at the same fraction;
    the embedding width stays (the tables are shared)."""
    gen = cfg.copy_and_resolve_references()
    width = max(int(round(cfg.hidden_size * fraction)), 1)
    heads = max(1, width // 64)
    gen.num_heads = heads if width % heads == 0 else 1
    gen.hidden_size = width
    gen.intermediate_size = max(1, int(round(cfg.intermediate_size * fraction)))
    gen.num_layers = layers or cfg.num_layers
    gen.embedding_size = cfg.embedding_size or cfg.hidden_size
    return gen


def sample_replacements(rng, logits, temperature: float = 1.0):
    """Gumbel-max sample from softmax(logits / T); no gradient flows through it."""
    logits = jax.lax.stop_gradient(logits.astype(jnp.float32))
    gumbel = -jnp.log(-jnp.log(jax.random.uniform(rng, logits.shape, minval=1e-9, maxval=1.0)))
    return jnp.argmax(logits / temperature + gumbel, axis=-1)


def replace_tokens(input_ids, positions, sampled, weights):
    """Writes sampled tokens at the weighted positions of input_ids [B, T]."""
    b = input_ids.shape[0]
    current = jnp.take_along_axis(input_ids, positions, axis=1)
    new = jnp.where(weights > 0, sampled.astype(input_ids.dtype), current)
    return input_ids.at[jnp.arange(b)[:, None], positions].set(new)


def discriminator_loss(logits, is_replaced, real):
    """Mean sigmoid cross-entropy over real tokens, and detection statistics."""
    real = real.astype(jnp.float32)
    target = is_replaced.astype(jnp.float32)
    bce = jnp.maximum(logits, 0) - logits * target + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    n = jnp.maximum(jnp.sum(real), 1.0)
    pred = logits > 0
    tp = jnp.sum(pred * is_replaced * real)
    return jnp.sum(bce * real) / n, {
        "rtd_loss": jnp.sum(bce * real) / n,
        "rtd_accuracy": jnp.sum((pred == is_replaced) * real) / n,
        "rtd_baseline_accuracy": jnp.sum((~is_replaced) * real) / n,
        "rtd_precision": tp / jnp.maximum(jnp.sum(pred * real), 1.0),
        "rtd_recall": tp / jnp.maximum(jnp.sum(is_replaced * real), 1.0),
    }


def loss_fn(params, batch, rng, ctx, deterministic=False):
    k_gen, k_sample, k_disc = jax.random.split(rng, 3)
    c = batch
    inputs = mlm.model_inputs(batch, ctx)
    variables = {"params": params}
    gen_logits = ctx.model.apply(
        variables, c["corrupted_ids"], inputs["segment_ids"], inputs["attention_mask"],
        inputs["positions"], inputs["document_ids"], c["mlm_positions"], deterministic,
        method="generate", rngs={"dropout": k_gen})
    gen_loss, gen = mlm.masked_cross_entropy(gen_logits, c["mlm_labels"], c["mlm_weights"])
    sampled = sample_replacements(k_sample, gen_logits, ctx.config.electra.temperature)
    replaced_ids = replace_tokens(c["corrupted_ids"], c["mlm_positions"], sampled, c["mlm_weights"])
    is_replaced = replaced_ids != batch["input_ids"]
    disc_logits, _ = ctx.model.apply(
        variables, replaced_ids, inputs["segment_ids"], inputs["attention_mask"],
        inputs["positions"], inputs["document_ids"], deterministic, method="discriminate",
        rngs={"dropout": k_disc})
    disc_loss, disc = discriminator_loss(disc_logits, is_replaced, batch["attention_mask"])
    loss = gen_loss + ctx.config.electra.disc_weight * disc_loss
    return loss, {"loss": loss, "gen_loss": gen_loss, "gen_accuracy": gen["accuracy"],
                  "mlm_accuracy": gen["accuracy"], "mlm_loss": gen_loss, **disc}


def forward_flops(config, batch_size: int, seq_len: int, predictions_per_row: int) -> float:
    """The discriminator and its per-token head on every token; the generator on every
    token and its MLM head on the prediction slots."""
    m, e = config.model, config.electra
    gen = generator_config(m, e.generator_fraction, e.generator_layers)
    tokens = batch_size * seq_len
    return (tokens * flops.encoder_flops_per_token(m, seq_len)
            + tokens * 2 * (m.hidden_size * m.hidden_size + m.hidden_size)
            + tokens * flops.encoder_flops_per_token(gen, seq_len)
            + batch_size * predictions_per_row * flops.mlm_head_flops(gen))


def summary(result: dict) -> list[str]:
    """The generator's masked-token line, then detection accuracy beside all-original."""
    lines = mlm.summary(result)
    if "eval/rtd_accuracy" in result:
        lines.append(f"held-out replaced-token detection accuracy "
                     f"{result['eval/rtd_accuracy']:.3f} vs. all-original baseline "
                     f"{result['eval/rtd_baseline_accuracy']:.3f}")
    return lines
