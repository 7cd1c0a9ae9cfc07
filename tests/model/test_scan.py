"""Scanned layers (encoder/model/scan.py): the scanned stack computes what the unrolled
stack computes, forward and backward, for every pattern it has to keep; the two
parameter layouts convert both ways; checkpoints, HF folders and the device mesh
see the scanned layout."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from encoder import config as config_lib
from encoder.checkpoints import sources
from encoder.interop import hf
from encoder.model import models, scan
from encoder.model.encoder import Encoder
from encoder.train import partitioning, trainer as trainer_lib
from helpers import init_masked_lm, random_ids

# name -> overrides of the tiny config; each keeps a different static per-layer pattern.
PATTERNS = {
    "post_ln": dict(num_layers=3),
    "pre_ln_rope": dict(num_layers=3, norm="pre_ln", position="rope"),
    # window with a global layer every 2: 5 layers = 2 groups + 1 unrolled tail layer
    "window_every2_tail": dict(num_layers=5, local_window=4, global_every=2,
                               position="rope", local_rope_theta=100.0),
    # ModernBERT-like: layer 0 has no attention norm (unrolled prefix), then 2 groups of 3
    "modernbert_every3": dict(num_layers=7, local_window=4, global_every=3, norm="pre_ln",
                              position="rope", local_rope_theta=100.0,
                              first_attention_norm=False, activation="geglu", use_bias=False),
    "deberta": dict(num_layers=3, position="deberta", deberta_position_buckets=8,
                    deberta_max_relative_positions=16),
    "alibi_all_local": dict(num_layers=3, position="alibi", local_window=4, global_every=0),
    "t5_bias": dict(num_layers=2, position="t5_bias"),
    "remat_full": dict(num_layers=3, remat="full"),
    "remat_dots": dict(num_layers=3, remat="dots"),
    "remat_dots_no_batch": dict(num_layers=3, remat="dots_with_no_batch_dims"),
}


def _pair(tiny_cfg, overrides):
    """(unrolled cfg, scanned cfg) of one pattern."""
    tiny_cfg.update(overrides)
    scanned = tiny_cfg.copy_and_resolve_references()
    scanned.scan_layers = "true"
    models.validate_config(scanned, 16)
    return tiny_cfg, scanned


def _inputs():
    rng = np.random.default_rng(0)
    ids = jnp.asarray(random_ids(rng, 2, 16, 101))
    mask = jnp.ones((2, 16), jnp.int32).at[1, 11:].set(0)
    docs = jnp.asarray(np.repeat([[0, 1], [0, 0]], 8, axis=1))  # row 0: two packed documents
    return ids, mask, docs


def _encode_all(cfg, enc_params, ids, mask, docs):
    """Final hidden [B, T, D] and every layer's hidden states [L + 1, B, T, D]."""
    hidden, aux = Encoder(models.freeze(cfg)).apply(
        {"params": enc_params}, ids, None, mask, None, docs, return_all=True)
    return hidden, jnp.stack(aux["hidden_states"])


def _random_params(cfg, seed=0):
    """The (unrolled) MaskedLM's parameters, traced not compiled (helpers.filled_params)."""
    return init_masked_lm(cfg, seed=seed)[1]


_UNROLLED = {}  # unrolled config (JSON) -> its loss, outputs and gradients


@pytest.mark.parametrize("name", list(PATTERNS))
def test_scanned_matches_unrolled_forward_and_gradients(tiny_cfg, name):
    unrolled, scanned = _pair(tiny_cfg, PATTERNS[name])
    assert scan.plan(scanned) is not None and scan.plan(unrolled) is None
    params = _random_params(unrolled)
    stacked = scan.stack_layers(params, scanned)
    assert scan.SCANNED in stacked["encoder"]
    ids, mask, docs = _inputs()
    weights = jax.random.normal(jax.random.key(1), (2, 16, unrolled.hidden_size))

    def loss(cfg, enc_params):
        hidden, states = _encode_all(cfg, enc_params, ids, mask, docs)
        return jnp.sum(hidden * weights) + 0.1 * jnp.sum(states[1:-1] ** 2), (hidden, states)

    def run(cfg, enc_params):
        return jax.jit(jax.value_and_grad(lambda p: loss(cfg, p), has_aux=True))(enc_params)

    # Rematerialisation changes no value, so the remat patterns are held to the unrolled
    # stack without remat: post_ln's reference, computed once (3 compiles fewer).
    reference = unrolled.copy_and_resolve_references()
    reference.remat = "none"
    key = reference.to_json()
    if key not in _UNROLLED:
        _UNROLLED[key] = run(reference, params["encoder"])
    (l0, (h0, s0)), g0 = _UNROLLED[key]
    (l1, (h1, s1)), g1 = run(scanned, stacked["encoder"])
    np.testing.assert_allclose(h1, h0, atol=1e-5, rtol=1e-5)
    assert s1.shape == s0.shape == (unrolled.num_layers + 1, 2, 16, unrolled.hidden_size)
    np.testing.assert_allclose(s1, s0, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(l1, l0, rtol=1e-5)
    # Gradients of the unrolled stack, stacked, are the scanned stack's gradients.
    g0 = scan.stack_layers({"encoder": g0}, scanned)["encoder"]
    assert jax.tree.structure(g0) == jax.tree.structure(g1)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
        np.testing.assert_allclose(b, a, atol=2e-5, rtol=1e-4)


def test_plans_and_layout_round_trip(tiny_cfg):
    unrolled, scanned = _pair(tiny_cfg, PATTERNS["modernbert_every3"])
    p = scan.plan(scanned)
    assert (p.prefix, p.period, p.groups, p.unrolled) == (1, 3, 2, (0,))
    _, params = init_masked_lm(unrolled)
    stacked = scan.stack_layers(params, scanned)
    enc = stacked["encoder"]
    assert sorted(k for k in enc if k.startswith("blocks")) == ["blocks_0"]
    assert sorted(enc["layers"]) == ["blocks_0", "blocks_1", "blocks_2"]
    kernel = enc["layers"]["blocks_2"]["mlp"]["wo"]["kernel"]  # [G, F, D]
    assert kernel.shape == (2, unrolled.intermediate_size, unrolled.hidden_size)
    # group 1's member 2 is layer 1 + 1 * 3 + 2 = 6
    np.testing.assert_array_equal(kernel[1], params["encoder"]["blocks_6"]["mlp"]["wo"]["kernel"])
    # ...and it is the layout the scanned model initialises
    _, fresh = init_masked_lm(scanned)
    assert jax.tree.structure(fresh) == jax.tree.structure(stacked)
    back = scan.unstack_layers(stacked, scanned)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)
    # a tail: 5 layers, groups of 2 -> layers 0-3 scanned, layer 4 unrolled
    p = scan.plan(_with(scanned, num_layers=5, global_every=2, first_attention_norm=True))
    assert (p.prefix, p.period, p.groups, p.unrolled) == (0, 2, 2, (4,))


def _with(cfg, **fields):
    out = cfg.copy_and_resolve_references()
    out.update(fields)
    return out


def test_auto_scans_from_twelve_layers_and_names_are_checked():
    cfg = config_lib.model_config("base")
    assert cfg.scan_layers == "auto" and scan.plan(cfg) is not None  # 12 layers
    assert scan.plan(_with(cfg, num_layers=11)) is None  # < 12: unrolled, as before
    assert scan.plan(_with(cfg, scan_layers="true", num_layers=2)) is not None
    assert scan.plan(_with(cfg, scan_layers="false")) is None
    assert scan.plan(_with(cfg, share_layers=True)) is None  # ALBERT: one block already
    old = _with(cfg)
    del old["scan_layers"]  # a config written before the field: its checkpoints are unrolled
    assert scan.plan(old) is None
    with pytest.raises(ValueError, match="valid names: auto, false, true"):
        models.validate_config(_with(cfg, scan_layers="sometimes"))


def test_checkpoint_of_either_layout_starts_a_run_of_the_other_on_8_devices(tiny_cfg):
    """merge_params (how every job applies init_from) converts the layout; the scanned
    parameters' layer axis stays unsplit while 'embed' is split over fsdp."""
    unrolled, scanned = _pair(tiny_cfg, PATTERNS["window_every2_tail"])
    mesh = partitioning.make_mesh({"data": 2, "fsdp": 4})
    ids, mask, docs = _inputs()

    def state_of(cfg, seed):
        """(sharded TrainState, its shardings): how the Trainer builds a run's start."""
        model = models.MaskedLM(models.freeze(cfg))
        init = lambda r: model.init(  # noqa: E731
            r, ids, None, mask, mlm_positions=jnp.zeros((2, 2), jnp.int32))["params"]
        return trainer_lib.init_state(init, optax.sgd(0.1), mesh, jax.random.key(seed))

    s_scan, sh_scan = state_of(scanned, 1)
    wi = sh_scan.params["encoder"]["layers"]["blocks_0"]["mlp"]["wi"]["kernel"]  # [G, D, F]
    assert tuple(wi.spec)[:2] == (None, "fsdp")
    s_unr, sh_unr = state_of(unrolled, 2)
    src_unr = jax.device_get(s_unr.params)
    src_scan = jax.device_get(s_scan.params)

    def logits(cfg, params):
        apply = jax.jit(lambda p: models.MaskedLM(models.freeze(cfg)).apply(
            {"params": p}, ids, None, mask, None, docs,
            mlm_positions=jnp.array([[1, 2], [3, 4]]))[0]["mlm_logits"])
        return apply(params)

    # unrolled checkpoint -> scanned run
    merged = sources.merge_params(s_scan.params, src_unr, sh_scan.params, strict=True)
    assert merged["encoder"]["layers"]["blocks_0"]["mlp"]["wi"]["kernel"].sharding == wi
    np.testing.assert_allclose(logits(scanned, merged), logits(unrolled, src_unr), atol=1e-5)
    # scanned checkpoint -> unrolled run
    merged = sources.merge_params(s_unr.params, src_scan, sh_unr.params, strict=True)
    assert "layers" not in merged["encoder"] and "blocks_4" in merged["encoder"]
    np.testing.assert_allclose(logits(unrolled, merged), logits(scanned, src_scan), atol=1e-5)


def _bert_cfg(num_layers, scan_layers):
    cfg = config_lib.model_config("tiny")
    cfg.update(dict(vocab_size=101, hidden_size=32, num_heads=4, intermediate_size=64,
                    max_position=64, num_layers=num_layers, scan_layers=scan_layers))
    return cfg


def test_hf_export_import_of_a_scanned_config(tmp_path):
    """write_folder unstacks for the family module; load stacks back when the imported
    config scans (12 layers: 'auto' does), so the round trip is the identity."""
    cfg = _bert_cfg(12, "true")
    _, params = init_masked_lm(cfg)
    hf.write_folder(str(tmp_path / "twelve"), "bert", cfg, params, "mlm")
    cfg2, params2 = hf.load(str(tmp_path / "twelve"))
    assert scan.plan(cfg2) is not None
    params = jax.device_get(params)
    assert jax.tree.structure(params2) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(params2), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)
    # A shallow scanned model imports unrolled ('auto' with 3 layers): the same weights.
    cfg = _bert_cfg(3, "true")
    _, params = init_masked_lm(cfg)
    hf.write_folder(str(tmp_path / "three"), "bert", cfg, params, "mlm")
    cfg3, params3 = hf.load(str(tmp_path / "three"))
    assert scan.plan(cfg3) is None
    restacked = scan.stack_layers(params3, cfg)
    for a, b in zip(jax.tree.leaves(restacked), jax.tree.leaves(jax.device_get(params))):
        np.testing.assert_array_equal(a, b)
