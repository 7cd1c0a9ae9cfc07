"""ModernBERT import/export (encoder/interop/modernbert.py) against HuggingFace's PyTorch model.

Tiny models (D=32, 4 layers, V=100) on rows longer than the local window, so
local and global layers (with their two RoPE bases) both shape the output.
"""
import importlib.util
import os

import flax.linen as nn
import jax
import numpy as np
import pytest

from encoder import config as config_lib
from encoder.interop import families, family, hf, modernbert
from encoder.model import models
from helpers import TORCH_GROUP

pytestmark = TORCH_GROUP  # imports torch (helpers.TORCH_GROUP)

FAMILY = modernbert.FAMILY
TOL = 1e-4
V, D, LAYERS = 100, 32, 4


# ---- folders: through encoder/interop/hf.py, as `export` and `init_from=hf:DIR` read them ----

def test_modernbert_is_registered():
    assert families.FAMILIES["modernbert"] is FAMILY
    assert families.BY_MODEL_TYPE["modernbert"] is FAMILY


def write_folder(out, cfg, params, head="mlm"):
    return hf.write_folder(str(out), FAMILY.name, cfg, params, head)


def read_folder(path):
    return hf.load(str(path))


# ---- inputs and runners ----

def padded_batch():
    """[CLS] a [SEP] b [SEP] rows of different lengths, right-padded to T=14 (> window 4)."""
    rng = np.random.default_rng(0)
    rows = []
    for a, b in ((5, 6), (3, 0), (8, 3)):
        ids = [2, *rng.integers(5, V, a), 3]
        if b:
            ids += [*rng.integers(5, V, b), 3]
        rows.append(ids)
    length = max(map(len, rows))
    ids = np.zeros((len(rows), length), np.int32)
    mask = np.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
    assert mask.min() == 0 and length == 14
    return ids, mask


def ours(cfg, params, ids, mask):
    """(last hidden [B, T, D], MLM logits [B, T, V]) from our MaskedLM."""
    out, aux = models.MaskedLM(models.freeze(cfg)).apply({"params": params}, ids, None, mask)
    return np.asarray(aux["encoded"]), np.asarray(out["mlm_logits"])


def torch_run(model, ids, mask):
    import torch
    with torch.no_grad():
        ii, mm = torch.tensor(ids, dtype=torch.long), torch.tensor(mask)
        hidden = model.model(input_ids=ii, attention_mask=mm).last_hidden_state.numpy()
        logits = model(input_ids=ii, attention_mask=mm).logits.numpy()
    return hidden, logits


def max_diff(a, b, mask):
    """Largest |a - b| over real tokens (padding rows are nobody's output)."""
    real = mask.astype(bool)
    return float(np.abs(a[real] - b[real]).max())


def perturb_torch(model, seed=0):
    """Every parameter moved off its init (norm scales != 1, biases != 0)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def perturb_jax(params, seed=0):
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree_util.tree_unflatten(tree, [
        np.asarray(x + 0.1 * jax.random.normal(k, x.shape)) for x, k in zip(leaves, keys)])


def hf_config(**overrides):
    from transformers import ModernBertConfig
    base = dict(vocab_size=V, hidden_size=D, intermediate_size=48, num_hidden_layers=LAYERS,
                num_attention_heads=2, global_attn_every_n_layers=3, local_attention=4,
                global_rope_theta=160000.0, local_rope_theta=10000.0,
                max_position_embeddings=64, pad_token_id=0, cls_token_id=2, sep_token_id=3,
                bos_token_id=2, eos_token_id=3, attn_implementation="eager")
    return ModernBertConfig(**{**base, **overrides})


# ModernBERT-base's choices, and every switch flipped (biases, untied decoder, SwiGLU, ...).
HF_VARIANTS = {
    "base_like": {},
    "flipped": dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                    decoder_bias=False, tie_word_embeddings=False, hidden_activation="silu",
                    classifier_activation="gelu_pytorch_tanh", global_attn_every_n_layers=2,
                    local_attention=5, local_rope_theta=None, norm_eps=1e-6),
}


@pytest.mark.parametrize("variant", sorted(HF_VARIANTS))
def test_hf_checkpoint_imports_with_parity(variant, tmp_path):
    import torch
    from transformers import ModernBertForMaskedLM
    torch.manual_seed(0)
    model = perturb_torch(ModernBertForMaskedLM(hf_config(**HF_VARIANTS[variant]))).eval()
    model.save_pretrained(tmp_path)
    cfg, params = read_folder(tmp_path)
    models.validate_config(cfg)
    assert cfg.local_window and cfg.first_attention_norm is False
    ids, mask = padded_batch()
    ref_hidden, ref_logits = torch_run(model, ids, mask)
    hidden, logits = ours(cfg, params, ids, mask)
    dh, dl = max_diff(hidden, ref_hidden, mask), max_diff(logits, ref_logits, mask)
    print(f"import {variant}: max |hidden diff| = {dh:.2e}, max |logit diff| = {dl:.2e}")
    assert dh <= TOL and dl <= TOL
    # The output is not trivially flat, and the bias-free decoder imported as zeros.
    assert np.abs(ref_logits).max() > 0.5
    if variant == "flipped":
        assert not np.any(params["mlm_head"]["output_bias"]) and "decoder" in params["mlm_head"]


def our_config(**overrides):
    """A tiny ModernBERT in our terms (experiments/modernbert_base.py's switches)."""
    cfg = config_lib.model_config("tiny")
    cfg.update(dict(vocab_size=V, hidden_size=D, num_layers=LAYERS, num_heads=2,
                    intermediate_size=48, max_position=64, position="rope", norm="pre_ln",
                    activation="geglu", use_bias=False, type_vocab_size=0, local_window=4,
                    global_every=3, rope_theta=160000.0, local_rope_theta=10000.0,
                    first_attention_norm=False, mlm_transform_bias=False, layer_norm_eps=1e-5,
                    dropout=0.0, attention_dropout=0.0))
    cfg.update(overrides)
    return cfg


OUR_VARIANTS = {
    "base_like": {},
    "flipped": dict(use_bias=True, mlm_transform_bias=True, tie_embeddings=False,
                    activation="swiglu", head_activation="relu", local_rope_theta=0.0,
                    global_every=2, local_window=6),
}


def our_params(cfg, seed=0):
    ids = np.ones((1, 8), np.int32)
    params = models.MaskedLM(models.freeze(cfg)).init(jax.random.key(seed), ids, None, ids)
    return perturb_jax(nn.meta.unbox(params["params"]), seed)  # plain arrays, no axis names


@pytest.mark.parametrize("variant", sorted(OUR_VARIANTS))
def test_export_loads_in_transformers_with_parity(variant, tmp_path):
    from transformers import ModernBertForMaskedLM
    cfg = our_config(**OUR_VARIANTS[variant])
    models.validate_config(cfg)
    params = our_params(cfg)
    write_folder(tmp_path, cfg, params)
    model, info = ModernBertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager",
                                                        output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    model.eval()
    ids, mask = padded_batch()
    ref_hidden, ref_logits = torch_run(model, ids, mask)
    hidden, logits = ours(cfg, params, ids, mask)
    dh, dl = max_diff(hidden, ref_hidden, mask), max_diff(logits, ref_logits, mask)
    print(f"export {variant}: max |hidden diff| = {dh:.2e}, max |logit diff| = {dl:.2e}")
    assert dh <= TOL and dl <= TOL


@pytest.mark.parametrize("variant", sorted(OUR_VARIANTS))
def test_export_then_import_is_identity(variant, tmp_path):
    cfg = our_config(**OUR_VARIANTS[variant])
    params = our_params(cfg, seed=1)
    write_folder(tmp_path, cfg, params)
    cfg2, params2 = read_folder(tmp_path)
    assert {k: v for k, v in cfg2.items() if k != "size"} == \
        {k: v for k, v in cfg.items() if k != "size"}
    flat, tree = jax.tree_util.tree_flatten(params)
    flat2, tree2 = jax.tree_util.tree_flatten(params2)
    assert tree == tree2
    assert all(np.array_equal(a, b) for a, b in zip(flat, flat2))


def test_base_model_export_has_no_head(tmp_path):
    from transformers import ModernBertModel
    cfg = our_config()
    params = our_params(cfg)
    tensors = FAMILY.params_to_hf(params, cfg, "base", {})
    assert not any(k.startswith(("head.", "decoder.")) for k in tensors)
    write_folder(tmp_path, cfg, params, head="base")
    _, info = ModernBertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values()), info
    with pytest.raises(family.Unrepresentable, match="exports"):
        FAMILY.params_to_hf(params, cfg, "sequence", {})


@pytest.mark.parametrize("change, named", [
    (dict(norm="post_ln"), "pre_ln"),
    (dict(position="learned", max_position=64), "rope"),
    (dict(activation="gelu"), "gated"),
    (dict(first_attention_norm=True), "no attention norm"),
    (dict(type_vocab_size=2), "token types"),
    (dict(share_layers=True), "share_layers"),
    (dict(global_every=0), "global_every"),
])
def test_unrepresentable_config_is_refused_on_export(change, named):
    cfg = our_config(**change)
    with pytest.raises(family.Unrepresentable, match=named) as err:
        FAMILY.config_to_hf(cfg)
    assert "Nearest that exports: position='rope', norm='pre_ln'" in str(err.value)
    assert named in FAMILY.mismatch(cfg)
    assert FAMILY.mismatch(our_config()) == ""


def test_hf_chooses_modernbert_for_a_modernbert_config():
    assert hf.choose_family(our_config(), "mlm") == "modernbert"
    assert hf.choose_family(our_config(**OUR_VARIANTS["flipped"]), "base") == "modernbert"


@pytest.mark.parametrize("change, named", [
    (dict(hidden_activation="gelu_pytorch_tanh"), "hidden_activation"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "rope_scaling"),
    (dict(norm_bias=True), "use_bias"),
    (dict(local_attention=1), "local_attention"),
    (dict(model_type="bert"), "model_type"),
])
def test_unrepresentable_hf_config_is_refused_on_import(change, named):
    hf = {**hf_config().to_dict(), **change}
    with pytest.raises(family.Unrepresentable, match=named):
        FAMILY.config_from_hf(hf)


def test_modernbert_base_experiment_is_hf_modernbert_base():
    """experiments/modernbert_base.py has ModernBertForMaskedLM(ModernBertConfig())'s parameters."""
    import torch
    from transformers import ModernBertConfig, ModernBertForMaskedLM
    from helpers import ROOT
    spec = importlib.util.spec_from_file_location(
        "modernbert_base", os.path.join(ROOT, "experiments", "modernbert_base.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config().model
    models.validate_config(cfg)
    reference = ModernBertConfig()
    exported = FAMILY.config_to_hf(cfg)
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "hidden_activation", "classifier_activation",
                "max_position_embeddings", "norm_eps", "norm_bias", "attention_bias",
                "mlp_bias", "classifier_bias", "decoder_bias", "global_rope_theta",
                "local_rope_theta", "local_attention", "global_attn_every_n_layers"):
        assert exported[key] == getattr(reference, key), key
    with torch.device("meta"):
        hf_count = sum(p.numel() for p in ModernBertForMaskedLM(reference).parameters())
    ids = np.ones((1, 8), np.int32)
    shapes = jax.eval_shape(lambda: models.MaskedLM(models.freeze(cfg)).init(
        jax.random.key(0), ids, None, ids))
    count = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(shapes["params"]))
    print(f"modernbert_base: ours {count:,} parameters, transformers {hf_count:,}")
    assert count == hf_count == 149_655_232
