"""Properties of the encoder g(x; θ) and its variants."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import encoder
from encoder import config as config_lib
from encoder.model import attention_pattern, models, positions
from encoder.model.attention_backends import dense
from helpers import count, init_masked_lm, random_ids

SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "t5_bias", "deberta", "none"]


@pytest.mark.parametrize("position", SCHEMES)
@pytest.mark.parametrize("norm", ["post_ln", "pre_ln"])
def test_padding_changes_no_real_token(tiny_cfg, position, norm):
    # one layer: every layer masks with the same mask and biases, so a leak shows in the
    # first (the 14 cases, one process: 18.8 s -> 13.2 s)
    tiny_cfg.position, tiny_cfg.norm, tiny_cfg.num_layers = position, norm, 1
    _, params = init_masked_lm(tiny_cfg)
    rng = np.random.default_rng(0)
    ids = random_ids(rng, 2, 10, tiny_cfg.vocab_size)
    seg = np.zeros_like(ids)
    seg[:, 6:] = 1
    short = encoder.encode(tiny_cfg, params, ids, seg, np.ones_like(ids))
    pad = 7
    ids_p = np.concatenate([ids, rng.integers(5, 100, size=(2, pad))], axis=1).astype(np.int32)
    seg_p = np.concatenate([seg, np.zeros((2, pad), np.int32)], axis=1)
    mask_p = np.concatenate([np.ones_like(ids), np.zeros((2, pad), np.int32)], axis=1)
    long = encoder.encode(tiny_cfg, params, ids_p, seg_p, mask_p)
    np.testing.assert_allclose(long[:, :10], short, atol=1e-5)


def test_no_positions_is_permutation_equivariant(tiny_cfg):
    tiny_cfg.position = "none"
    _, params = init_masked_lm(tiny_cfg)
    ids = random_ids(np.random.default_rng(1), 2, 12, tiny_cfg.vocab_size)
    perm = np.random.default_rng(2).permutation(12)
    out = encoder.encode(tiny_cfg, params, ids)
    out_perm = encoder.encode(tiny_cfg, params, ids[:, perm])
    np.testing.assert_allclose(out_perm, out[:, perm], atol=1e-5)
    # ...and a position scheme breaks the symmetry (so the test can fail).
    tiny_cfg.position = "learned"
    _, params = init_masked_lm(tiny_cfg)
    out = encoder.encode(tiny_cfg, params, ids)
    assert np.abs(encoder.encode(tiny_cfg, params, ids[:, perm]) - out[:, perm]).max() > 1e-3


def test_rope_scores_depend_only_on_offset():
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(1, 1, 1, 16)), jnp.float32)

    def score(i, j):
        qi = positions.apply_rope(q, jnp.array([[i]]), 10000.0)
        kj = positions.apply_rope(k, jnp.array([[j]]), 10000.0)
        return float(jnp.sum(qi * kj))

    for offset in (0, 1, 5, -3):
        ref = score(10, 10 + offset)
        for shift in (0, 7, 100):
            assert abs(score(10 + shift, 10 + offset + shift) - ref) < 1e-4
    assert abs(score(10, 11) - score(10, 15)) > 1e-3  # offset does matter


@pytest.mark.parametrize("scheme", ["alibi", "t5_bias"])
def test_relative_bias_depends_only_on_offset(scheme):
    from ml_collections import ConfigDict
    cfg = ConfigDict(dict(num_heads=4, t5_num_buckets=32, t5_max_distance=128,
                          initializer_range=0.5))
    module = positions.POSITIONS[scheme].bias(cfg)
    pos = jnp.arange(20)[None]
    variables = module.init(jax.random.key(0), pos)
    b0 = module.apply(variables, pos)
    b1 = module.apply(variables, pos + 37)
    np.testing.assert_allclose(b0, b1, atol=1e-6)
    # Toeplitz: entry (i, j) equals entry (i+1, j+1).
    np.testing.assert_allclose(b0[0, :, :-1, :-1], b0[0, :, 1:, 1:], atol=1e-6)
    assert np.abs(b0[0, :, 0, 1] - b0[0, :, 0, 9]).max() > 1e-4


def test_t5_buckets_are_symmetric_in_direction():
    off = jnp.arange(-200, 201)
    b = positions.t5_relative_bucket(off, 32, 128)
    assert int(b.min()) == 0 and int(b.max()) == 31
    assert bool(jnp.all((b[off < 0] < 16))) and bool(jnp.all(b[off > 0] >= 16))


def test_document_mask_isolates_documents(tiny_cfg):
    _, params = init_masked_lm(tiny_cfg)
    rng = np.random.default_rng(3)
    ids = random_ids(rng, 1, 12, tiny_cfg.vocab_size)
    docs = np.array([[0] * 5 + [1] * 7])
    pos = np.array([list(range(5)) + list(range(7))])
    out = encoder.encode(tiny_cfg, params, ids, positions=pos, document_ids=docs)
    ids2 = ids.copy()
    ids2[0, 6:] = random_ids(rng, 1, 6, tiny_cfg.vocab_size)
    out2 = encoder.encode(tiny_cfg, params, ids2, positions=pos, document_ids=docs)
    np.testing.assert_allclose(out2[:, :5], out[:, :5], atol=1e-5)
    # The first document alone, unpacked, gives the same vectors.
    alone = encoder.encode(tiny_cfg, params, ids[:, :5])
    np.testing.assert_allclose(alone, out[:, :5], atol=1e-5)


def test_local_window_limits_receptive_field(tiny_cfg):
    tiny_cfg.num_layers, tiny_cfg.local_window, tiny_cfg.position = 1, 4, "rope"
    ids = random_ids(np.random.default_rng(4), 1, 16, tiny_cfg.vocab_size)
    changed = ids.copy()
    changed[0, 15] = (changed[0, 15] + 1 - 5) % 96 + 5
    for global_every, far_token_matters in ((0, False), (1, True)):
        tiny_cfg.global_every = global_every
        _, params = init_masked_lm(tiny_cfg)
        out, out2 = (encoder.encode(tiny_cfg, params, x) for x in (ids, changed))
        assert (np.abs(out[0, 0] - out2[0, 0]).max() > 1e-5) == far_token_matters
    mask = attention_pattern.make_mask(None, None, window=4, length=8)[0, 0]
    expected = np.abs(np.arange(8)[:, None] - np.arange(8)[None]) <= 2
    np.testing.assert_array_equal(mask, expected)


def test_alternating_local_global_layers():
    from encoder.model.attention_pattern import layer_is_global
    from ml_collections import ConfigDict
    cfg = ConfigDict(dict(local_window=128, global_every=3))
    assert [layer_is_global(cfg, i) for i in range(7)] == [True, False, False, True, False,
                                                             False, True]
    cfg.global_every = 0
    assert not any(layer_is_global(cfg, i) for i in range(7))
    cfg.local_window = 0
    assert all(layer_is_global(cfg, i) for i in range(7))


def test_fused_and_reference_attention_agree():
    rng = np.random.default_rng(5)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 9, 3, 8)), jnp.float32) for _ in range(3))
    bias = jnp.asarray(rng.normal(size=(2, 3, 9, 9)), jnp.float32)
    am = jnp.asarray([[1] * 9, [1] * 6 + [0] * 3])
    docs = jnp.asarray([[0] * 4 + [1] * 5, [0] * 9])
    mask = attention_pattern.make_mask(am, docs, window=4, length=9)
    ref = dense.reference_attention(q, k, v, bias, mask)
    fused = dense.fused_attention(q, k, v, bias, mask, "xla")
    np.testing.assert_allclose(fused, ref, atol=1e-5)


def test_tied_head_gradient_has_both_contributions(tiny_cfg):
    """grad wrt the shared table = grad through the input + grad through the output."""
    from encoder.model import heads
    from encoder.model.encoder import Encoder
    from encoder.model.models import freeze
    model, params = init_masked_lm(tiny_cfg)
    assert "decoder" not in params["mlm_head"]  # no second V x E matrix
    table = params["encoder"]["embed"]["token"]["embedding"]
    ids = jnp.asarray(random_ids(np.random.default_rng(6), 2, 8, tiny_cfg.vocab_size))
    pos = jnp.array([[1, 3], [2, 5]])
    target = jnp.array([[7, 9], [11, 13]])
    cfg = freeze(tiny_cfg)

    def loss(table_in, table_out):
        p_enc = jax.tree.map(lambda x: x, params["encoder"])
        p_enc["embed"]["token"]["embedding"] = table_in
        hidden, _ = Encoder(cfg).apply({"params": p_enc}, ids)
        logits = heads.MlmHead(cfg).apply({"params": params["mlm_head"]}, hidden, pos,
                                          attend=lambda h: h @ table_out.T)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), target[..., None], -1))

    def tied_loss(table_):
        p = jax.tree.map(lambda x: x, params)
        p["encoder"]["embed"]["token"]["embedding"] = table_
        out, _ = model.apply({"params": p}, ids, None, None, mlm_positions=pos)
        logits = out["mlm_logits"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), target[..., None], -1))

    # one jitted program each for the losses and their gradients (eager flax applies
    # compile op by op)
    l_untied, (g_in, g_out) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(table, table)
    l_tied, g_tied = jax.jit(jax.value_and_grad(tied_loss))(table)
    np.testing.assert_allclose(g_tied, g_in + g_out, atol=1e-6)
    assert np.abs(g_in).max() > 0 and np.abs(g_out).max() > 0
    np.testing.assert_allclose(l_tied, l_untied, rtol=1e-6)


def bert_base_encoder_params(v, d=768, n=12, f=3072, p=512, s=2) -> int:
    """Hand formula: embeddings (V+P+S)d + LN 2d; per layer 4d^2+4d (attention),
    2df+f+d (MLP), 2*2d (two LNs)."""
    return (v + p + s) * d + 2 * d + n * (4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d)


def test_bert_base_parameter_count():
    from encoder.model.encoder import Encoder
    from encoder.model.models import freeze
    cfg = config_lib.model_config("base")
    cfg.vocab_size = 30522
    shapes = jax.eval_shape(lambda: Encoder(freeze(cfg)).init(
        jax.random.key(0), jnp.ones((1, 8), jnp.int32)))
    n = count(shapes)
    assert n == bert_base_encoder_params(30522)
    # Published BERT-base: ~110M (109.48M with the 0.59M pooler).
    assert abs(n + 768 * 768 + 768 - 109_482_240) == 0


def test_sharing_divides_stack_parameters(tiny_cfg):
    tiny_cfg.num_layers = 4
    _, params = init_masked_lm(tiny_cfg)
    stack = count({k: v for k, v in params["encoder"].items() if k.startswith("blocks")})
    tiny_cfg.share_layers = True
    _, shared = init_masked_lm(tiny_cfg)
    stack_shared = count({k: v for k, v in shared["encoder"].items() if k.startswith("shared")})
    assert stack == 4 * stack_shared
    rest = lambda p: count(p) - count({k: v for k, v in p["encoder"].items()
                                       if k.startswith(("blocks", "shared"))})
    assert rest(params) == rest(shared)


def test_factorized_embeddings_shrink_the_table(tiny_cfg):
    tiny_cfg.embedding_size = 8
    _, params = init_masked_lm(tiny_cfg)
    assert params["encoder"]["embed"]["token"]["embedding"].shape == (101, 8)
    assert params["encoder"]["embed_projection"]["kernel"].shape == (8, 32)
    assert params["mlm_head"]["transform"]["kernel"].shape == (32, 8)


VARIANTS = [
    dict(position=p) for p in SCHEMES
] + [
    dict(norm="pre_ln", activation="geglu", use_bias=False, position="rope",
         local_window=4, global_every=2, num_layers=3),  # ModernBERT-like
    dict(activation="relu"), dict(activation="swiglu", position="alibi"),
    dict(share_layers=True, embedding_size=16),  # ALBERT-like
    dict(tie_embeddings=False), dict(remat="full"), dict(remat="dots"),
    dict(dtype="bfloat16"), dict(attention_impl="reference"),
    dict(dropout=0.1, attention_dropout=0.1),
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_every_variant_jits(tiny_cfg, overrides):
    tiny_cfg.update(overrides)
    models.validate_config(tiny_cfg, 16)
    model, params = init_masked_lm(tiny_cfg)
    ids = jnp.asarray(random_ids(np.random.default_rng(0), 2, 16, tiny_cfg.vocab_size))
    am = jnp.ones((2, 16), jnp.int32).at[1, 12:].set(0)

    mlm_at = jnp.array([[1, 2], [3, 4]])

    @jax.jit
    def run(params, ids, key):
        """A training forward pass (dropout on) and an inference one, in one compile."""
        out, aux = model.apply({"params": params}, ids, None, am, mlm_positions=mlm_at,
                               deterministic=False, rngs={"dropout": key})
        inference, _ = model.apply({"params": params}, ids, None, am, mlm_positions=mlm_at)
        return out["mlm_logits"], aux["encoded"], inference["mlm_logits"]

    logits, hidden, jitted = run(params, ids, jax.random.key(1))
    assert logits.shape == (2, 2, 101) and hidden.shape == (2, 16, 32)
    assert hidden.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(logits)))
    eager, _ = model.apply({"params": params}, ids, None, am, mlm_positions=mlm_at)
    tol = 5e-2 if overrides.get("dtype") == "bfloat16" else 1e-5
    np.testing.assert_allclose(jitted, eager["mlm_logits"], atol=tol)


def test_return_all_hidden_states(tiny_cfg):
    from encoder.model.encoder import Encoder
    from encoder.model.models import freeze
    _, params = init_masked_lm(tiny_cfg)
    ids = jnp.ones((1, 6), jnp.int32)
    hidden, aux = Encoder(freeze(tiny_cfg)).apply({"params": params["encoder"]}, ids,
                                                  return_all=True)
    assert len(aux["hidden_states"]) == tiny_cfg.num_layers + 1
    np.testing.assert_array_equal(aux["hidden_states"][-1], hidden)


@pytest.mark.parametrize("change,message", [
    (dict(hidden_size=30), "not divisible by num_heads"),
    (dict(position="rotary"), "valid names: alibi, deberta, learned, none, rope, sinusoidal, t5_bias"),
    (dict(activation="swish"), "valid names"),
    (dict(norm="sandwich"), "post_ln, pre_ln"),
])
def test_validation_errors(tiny_cfg, change, message):
    tiny_cfg.update(change)
    with pytest.raises(ValueError, match=message):
        models.validate_config(tiny_cfg, 16)


def test_sequence_longer_than_learned_positions(tiny_cfg):
    with pytest.raises(ValueError, match="longer than the 64 learned positions"):
        models.validate_config(tiny_cfg, 65)
    tiny_cfg.position = "rope"  # no table: any length is fine
    models.validate_config(tiny_cfg, 65)


def test_encode_reads_electra_discriminator_params(tiny_cfg):
    from encoder.model import models
    from encoder.objectives import objectives
    gen = objectives.generator_config(tiny_cfg, 0.5)
    model = models.Electra(models.freeze(tiny_cfg), models.freeze(gen))
    ids = jnp.asarray(random_ids(np.random.default_rng(0), 2, 8, tiny_cfg.vocab_size))
    import flax.linen as nn
    params = nn.unbox(jax.jit(lambda r: model.init(  # jitted: an eager init compiles op by op
        r, ids, None, None, mlm_positions=jnp.zeros((2, 2), jnp.int32)))(jax.random.key(0)))[
        "params"]
    assert "embeddings" in params and "embed" not in params["encoder"]  # shared, outside
    _, aux = jax.jit(lambda p: model.apply({"params": p}, ids, None, None, None, None,
                                           method="discriminate"))(params)
    np.testing.assert_allclose(encoder.encode(tiny_cfg, params, ids), aux["encoded"], atol=1e-6)
    gen_table = params["embeddings"]["token"]["embedding"]
    assert gen_table.shape == (tiny_cfg.vocab_size, tiny_cfg.hidden_size)  # one shared table
