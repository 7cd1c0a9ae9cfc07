"""HuggingFace's FlaxBertForMaskedLM train step at this codebase's configuration: the
reference the step benchmark times (--mode=step --against=hf) and the compile benchmark
sizes on the same targets (--mode=compile --against=hf). transformers 4.x
(requirements-bench.txt): v5 dropped Flax."""
import jax
import jax.numpy as jnp
import optax

# FlaxBertSelfAttention: flax's dot_product_attention_weights, einsums over a dense mask,
# whatever --attention_impl says (that flag is this codebase's).
HF_ATTENTION = "huggingface einsum (dense mask)"


def hf_model(config, do_init: bool = True):
    """FlaxBertForMaskedLM with config's sizes, dropout 0 (attention dropout too)."""
    from transformers import BertConfig, FlaxBertForMaskedLM
    m = config.model
    hf_cfg = BertConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                        num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                        intermediate_size=m.intermediate_size,
                        max_position_embeddings=m.max_position,
                        type_vocab_size=m.type_vocab_size, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, hidden_act="gelu")
    return FlaxBertForMaskedLM(hf_cfg, input_shape=(1, config.data.seq_len),
                               dtype=jnp.dtype(m.dtype), seed=0, _do_init=do_init)


def hf_train_step(config, model):
    """step((params, opt_state), batch, rng) -> (state, {"loss"}): the same masking, the
    same masked-LM loss on the same masked slots and the same optax update as this
    codebase's step, HF's model computing logits at every position."""
    from encoder import config as config_lib
    from encoder.objectives import masking, mlm
    from encoder.train import optimizer
    m = config.model
    tx = optimizer.make_optimizer(config.train)
    max_pred = config_lib.max_predictions(config.data.seq_len, config.masking.rate)

    def step(state, batch, rng):
        params, opt_state = state
        c = masking.corrupt(rng, batch["input_ids"], batch["attention_mask"],
                            rate=config.masking.rate, max_predictions=max_pred, mask_id=4,
                            vocab_size=m.vocab_size, special_ids=(0, 1, 2, 3, 4))

        def loss_fn(p):
            logits = model(c["input_ids"], batch["attention_mask"], batch["segment_ids"],
                           params=p, train=False).logits  # [B, T, V]: every position
            gathered = jnp.take_along_axis(logits, c["mlm_positions"][..., None], axis=1)
            loss, _ = mlm.masked_cross_entropy(gathered.astype(jnp.float32), c["mlm_labels"],
                                               c["mlm_weights"])
            return loss

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), {"loss": loss}
    return step, tx


def hf_train_flops(config) -> float:
    """Model FLOPs of one HF step: 3 x forward, logits at all T positions."""
    from encoder.train import flops
    m = config.model
    b, t = config.train.batch_size, config.data.seq_len
    return 3.0 * b * t * (flops.encoder_flops_per_token(m, t) + flops.mlm_head_flops(m))
