"""DeBERTa-v2/v3 import and export match HuggingFace's PyTorch DebertaV2 classes.

Tiny models (hidden 32, 2 layers, 8 position buckets reaching 16) on rows of up
to 18 tokens, so the log buckets and their clamp are both exercised. Outputs
are compared at real (non-pad) positions only: DebertaV2Embeddings zeroes pad
positions and HF masks pad queries, which changes pad outputs and nothing else.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from encoder import config as config_lib
from encoder.interop import deberta, family
from encoder.model import models, positions
from helpers import TORCH_GROUP, LazyModule

pytestmark = TORCH_GROUP  # imports torch (helpers.TORCH_GROUP)

# real dependencies of the suite (never skipped), imported when a test first uses them
torch, transformers = LazyModule("torch"), LazyModule("transformers")

TOL = 1e-4
HF_TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=64, relative_attention=True, position_buckets=8,
               max_relative_positions=16, pos_att_type="p2c|c2p", norm_rel_ebd="layer_norm",
               share_att_key=True, position_biased_input=False, hidden_dropout_prob=0.0,
               attention_probs_dropout_prob=0.0, layer_norm_eps=1e-7)


def _batch(type_vocab_size: int):
    """3 rows: a full pair, a padded pair, a short single; [B, T] int arrays."""
    rng = np.random.default_rng(0)
    t = 18
    ids = rng.integers(5, 100, size=(3, t)).astype(np.int64)
    lengths = (18, 13, 6)
    mask = np.array([[1] * n + [0] * (t - n) for n in lengths], np.int64)
    types = np.zeros_like(ids)
    if type_vocab_size:
        types[0, 9:], types[1, 7:13] = 1, 1
    ids[mask == 0] = 0  # PAD
    return ids, types, mask


def test_deberta_is_registered():
    from encoder.interop import families
    assert families.FAMILIES["deberta"] is deberta.FAMILY
    assert families.BY_MODEL_TYPE["deberta-v2"] is deberta.FAMILY


def _load(folder):
    from encoder.interop import hf
    return hf.load(str(folder))


def _write(folder, cfg, params, head):
    from encoder.interop import hf
    return hf.write_folder(str(folder), "deberta", cfg, params, head)


def _ours(cfg, params, ids, types, mask):
    """(last hidden [B, T, D], MLM logits at every position [B, T, V]) of our MaskedLM."""
    model = models.MaskedLM(models.freeze(cfg))
    b, t = ids.shape
    out, aux = model.apply({"params": params}, jnp.asarray(ids, jnp.int32),
                           jnp.asarray(types, jnp.int32), jnp.asarray(mask, jnp.int32),
                           mlm_positions=jnp.broadcast_to(jnp.arange(t), (b, t)))
    return np.asarray(aux["encoded"]), np.asarray(out["mlm_logits"])


def _torch(model, ids, types, mask):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types),
                    attention_mask=torch.tensor(mask), output_hidden_states=True)
    return out.hidden_states[-1].numpy(), getattr(out, "logits", None)


def _real_diff(a, b, mask):
    return float(np.abs(np.asarray(a) - np.asarray(b))[mask.astype(bool)].max())


def _perturb_torch(model, seed=0):
    """Every parameter moved off its init (LayerNorms at 1/0 and zero biases hide mistakes)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))


def _perturb(params, seed=1):
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(tree, [np.asarray(x + 0.1 * jax.random.normal(k, x.shape))
                                     for x, k in zip(leaves, keys)])


def test_log_buckets_match_transformers():
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
    off = np.arange(-1100, 1101)
    for buckets, reach in ((8, 16), (256, 512), (6, 10)):
        ours = np.asarray(positions.deberta_log_bucket(jnp.asarray(off), buckets, reach))
        ref = make_log_bucket_position(torch.tensor(off), buckets, reach).long().numpy()
        np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("type_vocab_size", [0, 2])
def test_import_matches_pytorch(tmp_path, type_vocab_size):
    torch.manual_seed(0)
    config = transformers.DebertaV2Config(**HF_TINY, type_vocab_size=type_vocab_size)
    hf_model = transformers.DebertaV2ForMaskedLM(config).eval()
    _perturb_torch(hf_model)
    hf_model.save_pretrained(tmp_path / "mlm")
    hf_model.deberta.save_pretrained(tmp_path / "base")  # DebertaV2Model: no 'deberta.' prefix
    ids, types, mask = _batch(type_vocab_size)
    ref_hidden, ref_logits = _torch(hf_model, ids, types, mask)

    cfg, params = _load(tmp_path / "mlm")
    assert cfg.position == "deberta" and cfg.type_vocab_size == type_vocab_size
    hidden, logits = _ours(cfg, params, ids, types, mask)
    d_hidden = _real_diff(hidden, ref_hidden, mask)
    d_logits = _real_diff(logits, ref_logits.numpy(), mask)
    print(f"type_vocab_size={type_vocab_size}: max |ours - torch| hidden {d_hidden:.2e}, "
          f"logits {d_logits:.2e}")
    assert d_hidden <= TOL and d_logits <= TOL

    base_cfg, base = _load(tmp_path / "base")
    assert "mlm_head" not in base
    jax.tree.map(np.testing.assert_array_equal, base["encoder"], params["encoder"])


def test_lm_head_layout_imports_like_the_legacy_one(tmp_path):
    """legacy=False keeps the head under lm_predictions.lm_head.*: same function.

    transformers 4.57 runs that head only with tie_word_embeddings=False (tying replaces its
    dense by the word table); it multiplies by the word table either way.
    """
    torch.manual_seed(1)
    hf_model = transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
        **HF_TINY, type_vocab_size=0, legacy=False, tie_word_embeddings=False)).eval()
    _perturb_torch(hf_model, 1)
    hf_model.save_pretrained(tmp_path)
    ids, types, mask = _batch(0)
    _, ref_logits = _torch(hf_model, ids, types, mask)
    cfg, params = _load(tmp_path)
    _, logits = _ours(cfg, params, ids, types, mask)
    assert _real_diff(logits, ref_logits.numpy(), mask) <= TOL


def _our_tiny(type_vocab_size=0):
    cfg = config_lib.model_config("tiny")
    cfg.update(dict(vocab_size=100, hidden_size=32, num_heads=4, intermediate_size=64,
                    position="deberta", deberta_position_buckets=8,
                    deberta_max_relative_positions=16, type_vocab_size=type_vocab_size,
                    dropout=0.0, attention_dropout=0.0, layer_norm_eps=1e-7))
    model = models.MaskedLM(models.freeze(cfg))
    ids = jnp.ones((1, 8), jnp.int32)
    params = nn.unbox(model.init(jax.random.key(0), ids, ids * 0, ids,
                                 mlm_positions=jnp.zeros((1, 2), jnp.int32)))["params"]
    return cfg, _perturb(params)


@pytest.mark.parametrize("type_vocab_size", [0, 2])
def test_export_loads_in_transformers_with_the_same_logits(tmp_path, type_vocab_size):
    cfg, params = _our_tiny(type_vocab_size)
    ids, types, mask = _batch(type_vocab_size)
    hidden, logits = _ours(cfg, params, ids, types, mask)
    _write(tmp_path / "mlm", cfg, params, "mlm")
    hf_model, info = transformers.DebertaV2ForMaskedLM.from_pretrained(
        tmp_path / "mlm", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ref_hidden, ref_logits = _torch(hf_model.eval(), ids, types, mask)
    d_hidden = _real_diff(hidden, ref_hidden, mask)
    d_logits = _real_diff(logits, ref_logits.numpy(), mask)
    print(f"export type_vocab_size={type_vocab_size}: max |ours - torch| hidden {d_hidden:.2e}, "
          f"logits {d_logits:.2e}")
    assert d_hidden <= TOL and d_logits <= TOL

    _write(tmp_path / "base", cfg, params, "base")
    base, info = transformers.DebertaV2Model.from_pretrained(tmp_path / "base",
                                                             output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert _real_diff(hidden, _torch(base.eval(), ids, types, mask)[0], mask) <= TOL


def test_export_then_import_gives_identical_parameters():
    cfg, params = _our_tiny(2)
    hf = deberta.config_to_hf(cfg)
    back_cfg = deberta.config_from_hf(hf)
    assert {**back_cfg.to_dict(), "size": "tiny"} == cfg.to_dict()
    back = deberta.params_from_hf(deberta.params_to_hf(params, cfg, "mlm"), back_cfg)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    jax.tree.map(np.testing.assert_array_equal, back, params)


@pytest.mark.parametrize("change,message", [
    (dict(conv_kernel_size=3), "conv_kernel_size=3"),
    (dict(position_biased_input=True), "position_biased_input=True"),
    (dict(pos_att_type="c2p"), "pos_att_type=c2p"),
    (dict(share_att_key=False), "share_att_key=False"),
    (dict(norm_rel_ebd="none"), "norm_rel_ebd='none'"),
    (dict(relative_attention=False), "relative_attention=False"),
    (dict(embedding_size=16), "embedding_size=16"),
    (dict(model_type="deberta"), "not DeBERTa-v2"),
])
def test_import_refusals_name_the_problem(change, message):
    hf = {**HF_TINY, "model_type": "deberta-v2", **change}
    with pytest.raises(family.Unrepresentable, match=message):
        deberta.config_from_hf(hf)


@pytest.mark.parametrize("change,message", [
    (dict(norm="pre_ln"), "norm='pre_ln'.*Nearest that exports: position=deberta"),
    (dict(activation="geglu", head_activation="geglu"), "activation='geglu'"),
    (dict(position="learned"), "position='learned'"),
    (dict(use_bias=False), "use_bias=False"),
    (dict(embedding_size=16), "embedding_size=16"),
])
def test_export_refusals_name_the_nearest(change, message):
    cfg, _ = _our_tiny()
    cfg.update(change)
    assert deberta.mismatch(cfg)
    with pytest.raises(family.Unrepresentable, match=message):
        deberta.config_to_hf(cfg)


def test_unsupported_head_kind_is_refused():
    cfg, params = _our_tiny()
    assert deberta.mismatch(cfg) == ""
    with pytest.raises(family.Unrepresentable, match="head 'sequence'"):
        deberta.params_to_hf(params, cfg, "sequence", {})


def _count_torch(module) -> int:
    return sum(p.numel() for p in module.parameters())  # shared (tied) tensors once


def test_v3_base_recipe_matches_transformers_parameter_count():
    """experiments/deberta_v3_base.py against DebertaV2 of the same config, on the meta device."""
    from experiments import deberta_v3_base
    from encoder.objectives import objectives
    config = deberta_v3_base.get_config()
    cfg = config.model
    hf_config = transformers.DebertaV2Config(**deberta.config_to_hf(cfg))
    with torch.device("meta"):
        hf_base = _count_torch(transformers.DebertaV2Model(hf_config))
        hf_mlm = _count_torch(transformers.DebertaV2ForMaskedLM(hf_config))
    # The recipe trains RTD: its discriminator (shared embeddings + encoder) is DebertaV2Model.
    model = objectives.OBJECTIVES[config.objective].build_model(config)
    ids = jnp.ones((1, 8), jnp.int32)
    shapes = jax.eval_shape(lambda: nn.unbox(model.init(
        jax.random.key(0), ids, ids * 0, ids, mlm_positions=jnp.zeros((1, 2), jnp.int32))))
    p = shapes["params"]
    size = lambda tree: sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))  # noqa: E731
    assert size(p["embeddings"]) + size(p["encoder"]) == hf_base
    config.objective = "mlm"
    total, _ = objectives.parameter_count(config)
    assert total == hf_mlm
    # He et al. 2023: "86M backbone + 98M embedding" parameters (ours: 85.45M + 98.38M).
    emb = cfg.vocab_size * cfg.hidden_size
    assert round(emb / 1e6) == 98 and abs((hf_base - emb) / 1e6 - 86) < 1
    print(f"DebertaV2Model {hf_base:,} = ours; DebertaV2ForMaskedLM {hf_mlm:,} = ours")


def test_choose_family_picks_deberta_only_for_the_deberta_scheme():
    from encoder.interop import hf
    cfg, _ = _our_tiny()
    assert hf.choose_family(cfg, "mlm") == "deberta"
    cfg.position = "learned"
    assert hf.choose_family(cfg, "mlm") == "bert"
    assert "position='learned'" in deberta.mismatch(cfg)
