"""Every attention backend against the float32 reference, on CPU.

The Pallas kernels (splash for TPU, the Triton mha for GPU) run in Pallas
interpret mode here and cudnn runs its jax.nn.dot_product_attention call on
XLA, so the arguments each backend builds (segment ids, windows, key lengths)
are checked on packed rows with several documents, padding, local and global
layers and RoPE. Shapes stay at the kernels' smallest legal blocks (T = 128).
"""
import logging

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import config as config_lib
from encoder.model import attention_backends, attention_pattern, encoder, models
from encoder.model import positions as positions_lib
from encoder.model.attention_backends import dense, events, pallas
from encoder.model.attention_pattern import AttentionPattern
from helpers import filled_params

KERNELS = ("xla", "cudnn", "splash", "pallas_gpu")
B, T, H, K = 2, 128, 2, 16
F32_TOL = 1e-5
# bfloat16 inputs against the float32 reference: 8 mantissa bits (eps 2^-8 = 3.9e-3) on
# O(1) outputs, plus the kernels' own bf16 casts of the probabilities.
BF16_TOL = 3e-2


def packed_rows():
    """Row 0: three documents and padding; row 1: two documents and padding.

    Positions restart per document (RoPE offsets within a document only).
    """
    lengths = ((40, 30, 40, 18), (90, 20, 18))  # the last part of each row is padding
    docs = np.stack([np.repeat(np.r_[np.arange(1, len(n)), 0], n) for n in lengths])
    pos = np.stack([np.concatenate([np.arange(m) for m in n]) for n in lengths])
    return jnp.asarray(docs, jnp.int32), jnp.asarray(docs > 0, jnp.int32), jnp.asarray(pos)


def qkv(dtype=jnp.float32, seed=0):
    """Random q, k, v [B, T, H, K], RoPE-rotated by the packed rows' positions."""
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(B, T, H, K)), jnp.float32) for _ in range(3))
    _, _, pos = packed_rows()
    q, k = (positions_lib.apply_rope(x, pos, 1e4) for x in (q, k))
    return tuple(x.astype(dtype) for x in (q, k, v))


def run(impl, q, k, v, bias, pattern, cotangent):
    """Output [B, T, H, K] and d<output at real tokens, cotangent>/d(q, k, v)."""
    real = pattern.padding.astype(bool)[:, :, None, None]

    def loss(q, k, v):
        out = attention_backends.attend(q, k, v, bias, pattern, impl)
        return jnp.sum(jnp.where(real, out.astype(jnp.float32) * cotangent, 0.0)), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return out, grads


def max_diff(a, b, real):
    """Largest |a - b| over real tokens."""
    return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))[real]))


@pytest.fixture
def fresh_notes():
    """An empty once-per-reason log memory, so a test sees its own notes."""
    events._log_once.cache_clear()  # noqa: SLF001


@pytest.mark.parametrize("window", [0, 32], ids=["global", "local"])
@pytest.mark.parametrize("impl", KERNELS)
def test_backend_matches_reference_float32(impl, window):
    docs, pad, _ = packed_rows()
    pattern = AttentionPattern(pad, docs, window)
    q, k, v = qkv()
    cot = jnp.asarray(np.random.default_rng(1).normal(size=(B, T, H, K)), jnp.float32)
    ref, ref_grads = run("reference", q, k, v, None, pattern, cot)
    out, grads = run(impl, q, k, v, None, pattern, cot)
    real = np.asarray(pad, bool)
    assert bool(jnp.isfinite(out).all())  # padded rows too
    assert max_diff(out, ref, real) <= F32_TOL
    for g, rg in zip(grads, ref_grads):
        # gradients at padded tokens are exactly 0 in both: nothing real reads them
        assert float(jnp.max(jnp.abs(g - rg))) <= F32_TOL


@pytest.mark.parametrize("impl", ("splash", "pallas_gpu", "cudnn"))
def test_backend_bfloat16_within_its_precision(impl):
    docs, pad, _ = packed_rows()
    pattern = AttentionPattern(pad, docs, 0)
    cot = jnp.asarray(np.random.default_rng(1).normal(size=(B, T, H, K)), jnp.float32)
    ref, ref_grads = run("reference", *qkv(jnp.float32), None, pattern, cot)
    out, grads = run(impl, *qkv(jnp.bfloat16), None, pattern, cot)
    assert out.dtype == jnp.bfloat16
    real = np.asarray(pad, bool)
    assert max_diff(out, ref, real) <= BF16_TOL
    for g, rg in zip(grads, ref_grads):
        assert float(jnp.max(jnp.abs(g.astype(jnp.float32) - rg))) <= BF16_TOL * max(
            1.0, float(jnp.max(jnp.abs(rg))))


def test_padding_only_row_stays_finite():
    """A row of nothing but padding (an eval batch's filler) gives finite outputs everywhere."""
    docs, pad, _ = packed_rows()
    pad = pad.at[1].set(0)
    docs = docs.at[1].set(0)
    q, k, v = qkv()
    for impl in KERNELS + ("reference",):
        for window in (0, 32):
            attend = jax.jit(lambda *a, impl=impl: attention_backends.attend(*a, impl))
            out = attend(q, k, v, None, AttentionPattern(pad, docs, window))
            assert bool(jnp.isfinite(out).all()), (impl, window)


def test_segment_ids_put_padding_in_its_own_segment():
    docs, pad, _ = packed_rows()
    ids = attention_pattern.kernel_segment_ids(AttentionPattern(pad, docs))
    np.testing.assert_array_equal(ids[pad == 1], docs[pad == 1])
    assert bool((ids[pad == 0] == attention_pattern.PAD_SEGMENT).all())
    only_pad = attention_pattern.kernel_segment_ids(AttentionPattern(pad, None))
    np.testing.assert_array_equal(only_pad, np.where(pad, 0, attention_pattern.PAD_SEGMENT))
    assert attention_pattern.kernel_segment_ids(AttentionPattern()) is None


def test_auto_on_cpu_is_the_dense_xla_path_bit_for_bit():
    docs, pad, _ = packed_rows()
    q, k, v = qkv()
    bias = jnp.asarray(np.random.default_rng(2).normal(size=(B, H, T, T)), jnp.float32)
    for window in (0, 32):
        pattern = AttentionPattern(pad, docs, window)
        assert attention_backends.choose_backend("auto", q, None, pattern) == "xla"
        before = dense.fused_attention(q, k, v, bias,
                                       attention_pattern.make_mask(pad, docs, window, T))
        np.testing.assert_array_equal(attention_backends.attend(q, k, v, bias, pattern, "auto"),
                                      before)


def test_cudnn_takes_a_bias_and_key_lengths():
    """cudnn serves ALiBi-like biases; right padding goes in as key lengths."""
    _, pad, _ = packed_rows()
    pattern = AttentionPattern(pad, None, 0)
    q, k, v = qkv()
    bias = jnp.asarray(positions_lib.AlibiBias(H)(jnp.broadcast_to(jnp.arange(T), (B, T))))
    ref = attention_backends.attend(q, k, v, bias, pattern, "reference")
    out = attention_backends.attend(q, k, v, bias, pattern, "cudnn")
    assert max_diff(out, ref, np.asarray(pad, bool)) <= F32_TOL


def fallback_lines(caplog, impl):
    return [r.getMessage() for r in caplog.records
            if f"attention_impl={impl} cannot serve" in r.getMessage()]


@pytest.mark.parametrize("impl", ("splash", "pallas_gpu"))
def test_bias_falls_back_to_dense_and_says_so_once(impl, fresh_notes, caplog):
    docs, pad, _ = packed_rows()
    pattern = AttentionPattern(pad, docs, 0)
    q, k, v = qkv()
    bias = jnp.asarray(positions_lib.AlibiBias(H)(jnp.broadcast_to(jnp.arange(T), (B, T))))
    ref = attention_backends.attend(q, k, v, bias, pattern, "reference")
    with caplog.at_level(logging.WARNING):
        outs = [attention_backends.attend(q, k, v, bias, pattern, impl) for _ in range(2)]
    lines = fallback_lines(caplog, impl)
    assert len(lines) == 1 and "bias" in lines[0], lines
    for out in outs:
        assert max_diff(out, ref, np.asarray(pad, bool)) <= F32_TOL


def test_kernel_refusals_name_their_reason():
    q = jnp.zeros((1, 96, 2, 8), jnp.float32)
    empty = AttentionPattern()
    assert "multiple of 128" in pallas.refuse_splash(q, None, empty)
    assert "float32 or bfloat16" in pallas.refuse_splash(
        jnp.zeros((1, 128, 2, 16), jnp.float16), None, empty)
    assert "head dim >= 16" in pallas.refuse_pallas_gpu(
        jnp.zeros((1, 128, 2, 8)), None, empty)
    assert "local window" in pallas.refuse_pallas_gpu(
        jnp.zeros((1, 128, 2, 16)), None, AttentionPattern(window=32))


def init_params(cfg, ids, pad, pos, docs):
    """The encoder's parameters: init's tree, traced not compiled (helpers.filled_params)."""
    shapes = jax.eval_shape(lambda r: encoder.Encoder(cfg).init(r, ids, None, pad, pos,
                                                                docs)["params"],
                            jax.random.PRNGKey(0))
    return filled_params(nn.unbox(shapes))


def apply_encoder(cfg, params, ids, pad, pos, docs):
    """The encoder's output [B, T, D], jitted (traced afresh each call: a new function)."""
    return jax.jit(lambda p: encoder.Encoder(cfg).apply({"params": p}, ids, None, pad, pos,
                                                        docs)[0])(params)


def tiny_model_cfg(**overrides):
    cfg = config_lib.model_config("tiny")
    cfg.update(dict(vocab_size=101, hidden_size=32, num_heads=2, intermediate_size=64,
                    max_position=T, dropout=0.0, attention_dropout=0.0, type_vocab_size=0,
                    num_layers=2, position="rope", norm="pre_ln", activation="geglu",
                    local_window=32, global_every=2))  # layer 0 global, layer 1 local
    cfg.update(overrides)
    models.validate_config(cfg, T)
    return models.freeze(cfg)


def encode_with_grads(cfg, params, ids, pad, docs, pos, cotangent):
    """Encoder output [B, T, D] and d<output at real tokens, cotangent>/d params."""
    real = pad.astype(bool)[..., None]

    def loss(params):
        out, _ = encoder.Encoder(cfg).apply({"params": params}, ids, None, pad, pos, docs)
        return jnp.sum(jnp.where(real, out * cotangent, 0.0)), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return out, grads


@pytest.mark.parametrize("impl", ("splash", "pallas_gpu"))
def test_whole_encoder_matches_reference(impl):
    """A 2-layer ModernBERT-like encoder (global then local layer, RoPE restarting per
    document) on packed, padded rows: the kernel backend equals `reference`."""
    docs, pad, pos = packed_rows()
    rng = np.random.default_rng(3)
    ids = jnp.asarray(rng.integers(5, 101, (B, T)), jnp.int32)
    cot = jnp.asarray(rng.normal(size=(B, T, 32)), jnp.float32)
    ref_cfg = tiny_model_cfg(attention_impl="reference")
    params = nn.unbox(init_params(ref_cfg, ids, pad, pos, docs))
    ref, ref_grads = encode_with_grads(ref_cfg, params, ids, pad, docs, pos, cot)
    out, grads = encode_with_grads(tiny_model_cfg(attention_impl=impl), params, ids, pad, docs,
                                   pos, cot)
    assert bool(jnp.isfinite(out).all())
    assert max_diff(out, ref, np.asarray(pad, bool)) <= F32_TOL
    # parameter gradients sum over every token (entries up to ~40 here): 1e-5 relative to
    # each leaf's largest entry, absolute below 1
    diffs = jax.tree.map(
        lambda a, b: float(jnp.max(jnp.abs(a - b)) / max(1.0, jnp.max(jnp.abs(b)))),
        grads, ref_grads)
    assert max(jax.tree.leaves(diffs)) <= F32_TOL, diffs


@pytest.mark.parametrize("position", ("alibi", "t5_bias", "deberta"))
def test_position_biases_fall_back_in_the_model(position, fresh_notes, caplog):
    """Splash takes no additive bias: ALiBi, T5 and DeBERTa layers take the dense path
    (logged once for the whole model) and equal the reference."""
    docs, pad, pos = packed_rows()
    ids = jnp.asarray(np.random.default_rng(4).integers(5, 101, (B, T)), jnp.int32)
    cfgs = {impl: tiny_model_cfg(attention_impl=impl, position=position,
                                 deberta_position_buckets=8, deberta_max_relative_positions=32)
            for impl in ("reference", "splash")}
    params = init_params(cfgs["reference"], ids, pad, pos, docs)
    ref = apply_encoder(cfgs["reference"], params, ids, pad, pos, docs)
    with caplog.at_level(logging.WARNING):  # the note is logged where the model is traced
        out = apply_encoder(cfgs["splash"], params, ids, pad, pos, docs)
    lines = fallback_lines(caplog, "splash")
    assert len(lines) == 1 and "bias" in lines[0], lines
    assert max_diff(out, ref, np.asarray(pad, bool)) <= F32_TOL


def test_attention_dropout_takes_the_reference_path_and_says_so(fresh_notes, caplog):
    docs, pad, pos = packed_rows()
    ids = jnp.asarray(np.random.default_rng(5).integers(5, 101, (B, T)), jnp.int32)
    cfg = tiny_model_cfg(attention_impl="splash", attention_dropout=0.1)
    model = encoder.Encoder(cfg)
    params = init_params(cfg, ids, pad, pos, docs)
    with caplog.at_level(logging.WARNING):  # the note is logged where the model is traced
        out, _ = jax.jit(lambda p: model.apply(
            {"params": p}, ids, None, pad, pos, docs, deterministic=False,
            rngs={"dropout": jax.random.PRNGKey(1)}))(params)
    lines = [r.getMessage() for r in caplog.records if "attention_dropout" in r.getMessage()]
    assert len(lines) == 1 and "attention_impl=splash" in lines[0], lines
    assert bool(jnp.isfinite(out).all())


def test_backend_names_are_validated():
    for name in attention_backends.IMPLEMENTATIONS:
        models.validate_config(tiny_model_cfg(attention_impl=name))
    cfg = config_lib.model_config("tiny")
    cfg.attention_impl = "flash"
    with pytest.raises(ValueError, match="splash"):
        models.validate_config(cfg)


def test_scanned_layers_pass_the_pattern_through():
    """Under nn.scan (one group of a global and a local layer) the per-layer pattern reaches
    the kernel: splash equals reference on the forward pass."""
    docs, pad, pos = packed_rows()
    ids = jnp.asarray(np.random.default_rng(6).integers(5, 101, (B, T)), jnp.int32)
    cfgs = {impl: tiny_model_cfg(attention_impl=impl, scan_layers="true")
            for impl in ("reference", "splash")}
    variables = {"params": init_params(cfgs["reference"], ids, pad, pos, docs)}
    assert "layers" in variables["params"]  # really scanned
    ref, out = (jax.jit(encoder.Encoder(cfgs[impl]).apply)(variables, ids, None, pad, pos,
                                                           docs)[0]
                for impl in ("reference", "splash"))
    assert max_diff(out, ref, np.asarray(pad, bool)) <= F32_TOL


def test_cudnn_packed_segments_rebuild_the_document_mask():
    """cuDNN's packed layout (segment lengths and offsets, O(T) per row) says exactly what
    make_mask says for every real query: same document, real keys only."""
    docs, pad, _ = packed_rows()
    pattern = AttentionPattern(pad, docs)
    seqlens, offsets = attention_pattern.cudnn_packed_segments(pattern, T)
    assert seqlens.shape == (B, T) and offsets.shape == (B, T + 1)
    np.testing.assert_array_equal(np.asarray(seqlens[:, :4]), [[40, 30, 40, -1], [90, 20, -1, -1]])
    idx = np.arange(T)
    seg = np.full((B, T), -1)
    for b in range(B):
        for s, (o, n) in enumerate(zip(np.asarray(offsets[b]), np.asarray(seqlens[b]))):
            if o >= 0:
                seg[b, (idx >= o) & (idx < o + n)] = s
    rebuilt = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] >= 0)  # [B, T, T]
    dense = np.asarray(pattern.dense(T))[:, 0]
    real = np.asarray(pad).astype(bool)
    np.testing.assert_array_equal(rebuilt[real], dense[real])


@pytest.mark.parametrize("impl", ("splash", "pallas_gpu"))
def test_kernels_run_on_each_devices_rows_under_a_mesh(impl):
    """Under the trainer's activation context the Pallas kernels run inside shard_map over
    the batch axes: the same numbers as the reference, and no operand gathered."""
    from encoder.train import partitioning
    mesh = partitioning.make_mesh({"data": 2, "fsdp": 2}, jax.devices()[:4])
    docs, pad, _ = packed_rows()
    docs, pad = (jnp.concatenate([x, x]) for x in (docs, pad))  # B = 4: a row per device
    q, k, v = (jnp.concatenate([x, x]) for x in qkv())
    pattern = AttentionPattern(pad, docs)
    shard = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(("data", "fsdp")))
    fn = jax.jit(partitioning.traced_under(
        lambda q, k, v, pad, docs: attention_backends.attend(
            q, k, v, None, AttentionPattern(pad, docs), impl),
        mesh), in_shardings=shard, out_shardings=shard)
    compiled = fn.lower(q, k, v, pad, docs).compile()
    assert "all-gather" not in compiled.as_text()
    out = compiled(q, k, v, pad, docs)
    ref = dense.reference_attention(q, k, v, None, pattern.dense(T))
    real = pad.astype(bool)
    assert max_diff(out, ref, real) < F32_TOL


def test_the_target_platform_is_the_meshs_not_the_hosts():
    """auto and native-vs-interpret follow the devices a step is compiled for."""
    from encoder.model import sharding
    from encoder.train import partitioning
    cpu_mesh = partitioning.make_mesh({"data": 1, "fsdp": 1}, jax.devices()[:1])
    q, _, _ = qkv(jnp.bfloat16)
    pattern = AttentionPattern(*packed_rows()[1::-1])
    with partitioning.activation_context(cpu_mesh):
        assert sharding.target_platform() == "cpu"
        assert attention_backends.choose_backend("auto", q, None, pattern) == "xla"
    import importlib.util
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip("libtpu is not installed: no TPU topology to name")
    from encoder.aot import compile_report
    tpu_mesh = partitioning.make_mesh({"data": 4, "fsdp": 1},
                                      compile_report.topology_devices("v5e:2x2"))
    with partitioning.activation_context(tpu_mesh):
        assert sharding.target_platform() == "tpu"
        assert attention_backends.choose_backend("auto", q, None, pattern) == "splash"
        assert not pallas.interpret_mode("tpu", "splash")
