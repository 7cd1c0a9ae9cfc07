"""HuggingFace ModernBERT (Warner et al. 2024) <-> this codebase: the family's mapping table.

ModernBERT is our pre_ln + rope + geglu encoder with no token types, no absolute
positions and (by default) no biases, plus three things the model config names:
  * `local_window` / `global_every`: HF's `local_attention` (keys with
    |i - j| <= local_attention // 2) on every layer whose index is not a multiple
    of `global_attn_every_n_layers`;
  * `local_rope_theta`: local layers rotate with their own RoPE base
    (HF `local_rope_theta`, 1e4) while global layers use `global_rope_theta`;
  * `first_attention_norm=False`: layer 0's `attn_norm` is nn.Identity (its
    input is already the normed embeddings).

Layouts (HF Linear weights are [out, in]; ours [in, out]):
  Wqkv.weight [3D, D]  ->  qkv.kernel [D, 3, H, K]   (HF views the 3D outputs as 3, H, K)
  attn.Wo.weight [D, D] -> out.kernel [H, K, D]
  mlp.Wi.weight [2F, D] -> wi.kernel [D, 2, F]       (first F: act input, last F: gate,
                                                      as HF's chunk(2) and our GeGLU read them)
  head.dense / head.norm -> mlm_head.transform / transform_norm;  decoder.bias -> output_bias

Exact mappings that are not one-to-one (why the round trip HF -> ours -> HF may
change a flag but never a logit):
  * MLM transform bias: HF has one only with `classifier_bias`; our config says
    so with `mlm_transform_bias` (ModernBERT-base: False), so it maps both ways.
  * decoder bias: ours always exists. `decoder_bias=False` imports as zeros
    (what HF's own init gives a missing decoder bias); export writes
    `decoder_bias=True` with our bias, zeros included.
  * biases: our `use_bias` is one switch for every LayerNorm and Dense of the
    encoder; HF has three (`norm_bias`, `attention_bias`, `mlp_bias`). They
    import only when all three agree (every released ModernBERT has all False).
  * an odd `local_attention` w imports as w - 1: both keep |i - j| <= w // 2.
  * `global_attn_every_n_layers=1` (every layer global) imports as no window.
Not exact, training only: HF has three dropout rates (embedding, attention,
mlp); we have `dropout` (embeddings, sub-layer outputs) and `attention_dropout`
(probabilities; HF also drops the attention output with it). Inference is
unaffected.

Special-token ids in an exported config.json are the tokenizer's (hf.write_folder's
info), by default this codebase's fixed ones (encoder/data/tokenizer.py); an
imported folder's own ids travel with its tokenizer, not the model config.
"""
import numpy as np

from encoder import config as config_lib
from encoder.data import tokenizer as tokenizer_lib
from encoder.interop import family

PREFIX = "model."  # ModernBertForMaskedLM's base_model_prefix

# HF hidden_activation (the GLU's act on the input half) -> our gated activation.
_MLP_ACTIVATIONS = {"gelu": "geglu", "silu": "swiglu", "swish": "swiglu"}
# HF classifier_activation -> our head_activation (head_activation = the MLM transform's).
_HEAD_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                     "relu": "relu"}
_HEAD_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
_MLP_TO_HF = {"geglu": "gelu", "swiglu": "silu"}

NEAREST = ("position='rope', norm='pre_ln', first_attention_norm=False, activation='geglu', "
           "type_vocab_size=0, embedding_size=0, share_layers=False "
           "(experiments/modernbert_base.py)")


# ---- configs ----

def config_from_hf(hf: dict):
    """A HF ModernBertConfig dict -> our model ConfigDict; Unrepresentable on what we lack."""
    if hf.get("model_type", "modernbert") != "modernbert":
        raise family.Unrepresentable(f"model_type {hf['model_type']!r} is not 'modernbert'")
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in hf]
    if missing:
        raise family.Unrepresentable(f"config.json lacks {missing}: not a ModernBERT config")
    act = hf.get("hidden_activation", "gelu")
    if act not in _MLP_ACTIVATIONS:
        raise family.Unrepresentable(
            f"hidden_activation {act!r}: our gated MLPs are act(x W) * (x V) with act in "
            f"{sorted(_MLP_ACTIVATIONS)} (geglu, swiglu)")
    head_act = hf.get("classifier_activation", "gelu")
    if head_act not in _HEAD_ACTIVATIONS:
        raise family.Unrepresentable(f"classifier_activation {head_act!r} not supported; known: "
                                     f"{sorted(_HEAD_ACTIVATIONS)}")
    scaling = hf.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type", "default")) != "default":
        raise family.Unrepresentable(f"rope_scaling {scaling!r}: only plain RoPE is supported")
    if hf.get("partial_rotary_factor", 1.0) != 1.0:
        raise family.Unrepresentable("partial_rotary_factor != 1: we rotate the whole head")
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    if hf.get("head_dim") not in (None, head_dim):
        raise family.Unrepresentable(f"head_dim {hf['head_dim']} != hidden_size / heads")
    biases = {k: bool(hf.get(k, False)) for k in ("norm_bias", "attention_bias", "mlp_bias")}
    if len(set(biases.values())) > 1:
        raise family.Unrepresentable(
            f"{biases}: our use_bias switches every norm and dense bias together")
    every = hf.get("global_attn_every_n_layers", 3)
    if every < 1:
        raise family.Unrepresentable(f"global_attn_every_n_layers={every}: must be >= 1")
    window = 0 if every == 1 else 2 * (hf.get("local_attention", 128) // 2)
    if every > 1 and window < 2:
        # |i - j| <= 0 (each token sees itself only) has no local_window: ours 0 = global
        raise family.Unrepresentable(f"local_attention={hf.get('local_attention')}: "
                                     "a window must keep at least one neighbour (>= 2)")
    global_theta = float(hf.get("global_rope_theta", 160000.0))
    local_theta = hf.get("local_rope_theta", 10000.0)
    # None or the global base: one theta everywhere, which our config spells 0.
    local_theta = 0.0 if local_theta in (None, global_theta) else float(local_theta)

    cfg = config_lib.model_config("base")
    cfg.update(dict(
        size="hf",
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        embedding_size=0,
        type_vocab_size=0,
        max_position=hf.get("max_position_embeddings", 8192),
        position="rope",
        rope_theta=global_theta,
        local_rope_theta=local_theta,
        norm="pre_ln",
        first_attention_norm=False,
        activation=_MLP_ACTIVATIONS[act],
        head_activation=_HEAD_ACTIVATIONS[head_act],
        use_bias=biases["norm_bias"],
        mlm_transform_bias=bool(hf.get("classifier_bias", False)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        layer_norm_eps=hf.get("norm_eps", 1e-5),
        dropout=max(hf.get("embedding_dropout", 0.0), hf.get("mlp_dropout", 0.0)),
        attention_dropout=hf.get("attention_dropout", 0.0),
        local_window=window,
        global_every=every if window else 1,
        share_layers=False,
        initializer_range=hf.get("initializer_range", 0.02),
    ))
    return cfg


def _problems(cfg) -> list[str]:
    """What in our config ModernBertModel cannot compute (empty: it exports exactly)."""
    get = cfg.get
    found = []
    if cfg.position != "rope":
        found.append(f"position={cfg.position!r} (ModernBERT rotates queries and keys: 'rope')")
    if cfg.norm != "pre_ln":
        found.append(f"norm={cfg.norm!r} (ModernBERT is 'pre_ln')")
    if get("first_attention_norm", True):
        found.append("first_attention_norm=True (ModernBERT's layer 0 has no attention norm)")
    if cfg.activation not in _MLP_TO_HF:
        found.append(f"activation={cfg.activation!r} (ModernBERT's MLP is gated: "
                     f"{sorted(_MLP_TO_HF)})")
    if cfg.head_activation not in _HEAD_TO_HF:
        found.append(f"head_activation={cfg.head_activation!r} (one of {sorted(_HEAD_TO_HF)})")
    if cfg.type_vocab_size:
        found.append(f"type_vocab_size={cfg.type_vocab_size} (ModernBERT has no token types: 0)")
    if cfg.embedding_size not in (0, cfg.hidden_size):
        found.append(f"embedding_size={cfg.embedding_size} (no factorized embeddings: 0)")
    if cfg.share_layers:
        found.append("share_layers=True (every HF layer has its own weights)")
    if cfg.local_window and cfg.global_every < 1:
        found.append("global_every=0 with a window (HF's layer 0 is always global: >= 1)")
    return found


def mismatch(cfg) -> str:
    """Why cfg is not a ModernBERT, or '' when it exports exactly."""
    found = _problems(cfg)
    return "; ".join(found)


def config_to_hf(cfg, info: dict | None = None) -> dict:
    """Our model config -> the complete ModernBertConfig dict (model_type/architectures aside).

    info: hf.write_folder's token ids ({'pad_id', 'cls_id', ...}); default: our fixed ids.
    """
    found = _problems(cfg)
    if found:
        raise family.Unrepresentable(
            f"ModernBERT cannot represent {'; '.join(found)}. Nearest that exports: {NEAREST}")
    every = cfg.global_every if cfg.local_window else 1
    tok = tokenizer_lib
    ids = {"pad_id": tok.PAD_ID, "unk_id": tok.UNK_ID, "cls_id": tok.CLS_ID,
           "sep_id": tok.SEP_ID, "mask_id": tok.MASK_ID}
    ids.update({k: v for k, v in (info or {}).items() if k in ids})
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "hidden_activation": _MLP_TO_HF[cfg.activation],
        "classifier_activation": _HEAD_TO_HF[cfg.head_activation],
        "max_position_embeddings": cfg.max_position,
        "initializer_range": cfg.initializer_range,
        "norm_eps": cfg.layer_norm_eps,
        "norm_bias": bool(cfg.use_bias),
        "attention_bias": bool(cfg.use_bias),
        "mlp_bias": bool(cfg.use_bias),
        "classifier_bias": bool(cfg.get("mlm_transform_bias", True)),
        "decoder_bias": True,  # our output bias always exists
        "tie_word_embeddings": bool(cfg.tie_embeddings),
        "global_rope_theta": float(cfg.rope_theta),
        "local_rope_theta": float(cfg.get("local_rope_theta", 0.0) or cfg.rope_theta),
        "local_attention": cfg.local_window or 128,  # unused when every layer is global
        "global_attn_every_n_layers": every,
        "embedding_dropout": cfg.dropout,
        "mlp_dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "classifier_dropout": cfg.dropout,
        "pad_token_id": ids["pad_id"],
        "unk_token_id": ids["unk_id"],
        "cls_token_id": ids["cls_id"],
        "sep_token_id": ids["sep_id"],
        "mask_token_id": ids["mask_id"],
        "bos_token_id": ids["cls_id"],
        "eos_token_id": ids["sep_id"],
        "torch_dtype": "float32",
    }


# ---- tensors ----

def _qkv_from_hf(t, p, cfg) -> dict:
    """Wqkv [3D, D] (+ [3D]) -> {'kernel': [D, 3, H, K], 'bias': [3, H, K]}."""
    d, h = cfg.hidden_size, cfg.num_heads
    out = {"kernel": t[f"{p}.weight"].T.reshape(d, 3, h, d // h)}
    if cfg.use_bias:
        out["bias"] = t[f"{p}.bias"].reshape(3, h, d // h)
    return out


def _fused_to_hf(dense: dict, p) -> dict:
    """A fused input kernel [D, n, ...] (Wqkv [D, 3, H, K], Wi [D, 2, F]) -> [n*..., D]."""
    d = dense["kernel"].shape[0]
    out = {f"{p}.weight": np.asarray(dense["kernel"]).reshape(d, -1).T}
    if "bias" in dense:
        out[f"{p}.bias"] = np.asarray(dense["bias"]).reshape(-1)
    return out


def _out_from_hf(t, p, cfg) -> dict:
    """attn.Wo [D, D] -> {'kernel': [H, K, D], 'bias': [D]}."""
    d, h = cfg.hidden_size, cfg.num_heads
    out = {"kernel": t[f"{p}.weight"].T.reshape(h, d // h, d)}
    if cfg.use_bias:
        out["bias"] = t[f"{p}.bias"]
    return out


def _out_to_hf(o: dict, p) -> dict:
    d = o["kernel"].shape[-1]
    out = {f"{p}.weight": np.asarray(o["kernel"]).reshape(-1, d).T}
    if "bias" in o:
        out[f"{p}.bias"] = np.asarray(o["bias"])
    return out


def _wi_from_hf(t, p, cfg) -> dict:
    """mlp.Wi [2F, D] -> {'kernel': [D, 2, F], 'bias': [2, F]} (input half, then gate)."""
    d, f = cfg.hidden_size, cfg.intermediate_size
    out = {"kernel": t[f"{p}.weight"].T.reshape(d, 2, f)}
    if cfg.use_bias:
        out["bias"] = t[f"{p}.bias"].reshape(2, f)
    return out


class _Tensors(dict):
    """A tensor dict whose missing key names the tensor (not a bare KeyError)."""

    def __missing__(self, key):
        raise family.Unrepresentable(
            f"the checkpoint has no tensor {key!r} (it has {len(self)} tensors, e.g. "
            f"{sorted(self)[:3]}): not a ModernBERT layout, or its config disagrees")


def _strip_prefix(tensors: dict) -> dict:
    """ModernBertFor* keys start with 'model.' (heads: 'head.', 'decoder.');
    ModernBertModel's own state dict has no prefix."""
    return {k[len(PREFIX):] if k.startswith(PREFIX) else k: np.asarray(v, np.float32)
            for k, v in tensors.items()}


def params_from_hf(tensors: dict, cfg) -> dict:
    """HF state-dict tensors -> {'encoder': ..., 'mlm_head': ... (when the folder has one)}."""
    t = _Tensors(_strip_prefix(tensors))
    b = cfg.use_bias
    encoder = {
        "embed": {"token": {"embedding": t["embeddings.tok_embeddings.weight"]},
                  "norm": family.norm_from_hf(t, "embeddings.norm", bias=b)},
        "final_norm": family.norm_from_hf(t, "final_norm", bias=b),
    }
    for i in range(cfg.num_layers):
        p = f"layers.{i}"
        block = {
            "attention": {"qkv": _qkv_from_hf(t, f"{p}.attn.Wqkv", cfg),
                          "out": _out_from_hf(t, f"{p}.attn.Wo", cfg)},
            "mlp": {"wi": _wi_from_hf(t, f"{p}.mlp.Wi", cfg),
                    "wo": family.linear_from_hf(t, f"{p}.mlp.Wo", bias=b)},
            "mlp_norm": family.norm_from_hf(t, f"{p}.mlp_norm", bias=b),
        }
        if i > 0:  # layer 0's attn_norm is nn.Identity (first_attention_norm=False)
            block["attention_norm"] = family.norm_from_hf(t, f"{p}.attn_norm", bias=b)
        encoder[f"blocks_{i}"] = block
    params = {"encoder": encoder}
    if "head.dense.weight" in t:
        head = {"transform": family.linear_from_hf(t, "head.dense",
                                                   bias=cfg.mlm_transform_bias),
                "transform_norm": family.norm_from_hf(t, "head.norm", bias=b),
                # decoder_bias=False: HF's forward adds nothing, i.e. a zero bias.
                "output_bias": t.get("decoder.bias",
                                     np.zeros((cfg.vocab_size,), np.float32))}
        if not cfg.tie_embeddings:
            head["decoder"] = {"kernel": t["decoder.weight"].T}  # [D, V]
        params["mlm_head"] = head
    return params


def params_to_hf(params: dict, cfg, head: str = "mlm", info: dict | None = None) -> dict:
    """Our params tree -> HF state-dict tensors for ModernBertModel ('base') or ...ForMaskedLM."""
    del info  # no fine-tuned heads: ModernBERT's add a dense+norm head our tasks lack
    if head not in FAMILY.architectures:
        raise family.Unrepresentable(
            f"head {head!r}: ModernBERT exports {sorted(FAMILY.architectures)} (its sequence/"
            "token heads put a dense + norm before the classifier, which our heads lack)")
    if head == "mlm" and "mlm_head" not in params:
        raise family.Unrepresentable("head 'mlm' needs params['mlm_head'] (a MaskedLM's params)")
    enc = params["encoder"]
    out = {"embeddings.tok_embeddings.weight": np.asarray(enc["embed"]["token"]["embedding"])}
    out.update(family.norm_to_hf(enc["embed"]["norm"], "embeddings.norm"))
    for i in range(cfg.num_layers):
        blk, p = enc[f"blocks_{i}"], f"layers.{i}"
        if "attention_norm" in blk:
            out.update(family.norm_to_hf(blk["attention_norm"], f"{p}.attn_norm"))
        out.update(_fused_to_hf(blk["attention"]["qkv"], f"{p}.attn.Wqkv"))
        out.update(_out_to_hf(blk["attention"]["out"], f"{p}.attn.Wo"))
        out.update(family.norm_to_hf(blk["mlp_norm"], f"{p}.mlp_norm"))
        out.update(_fused_to_hf(blk["mlp"]["wi"], f"{p}.mlp.Wi"))
        out.update(family.linear_to_hf(blk["mlp"]["wo"], f"{p}.mlp.Wo"))
    out.update(family.norm_to_hf(enc["final_norm"], "final_norm"))
    out = {PREFIX + k: v for k, v in out.items()}
    if head == "mlm":
        mlm = params["mlm_head"]
        out.update(family.linear_to_hf(mlm["transform"], "head.dense"))
        out.update(family.norm_to_hf(mlm["transform_norm"], "head.norm"))
        out["decoder.bias"] = np.asarray(mlm["output_bias"])
        if "decoder" in mlm:  # untied output table
            out["decoder.weight"] = np.asarray(mlm["decoder"]["kernel"]).T  # [V, D]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


FAMILY = family.Family(
    name="modernbert",
    model_type="modernbert",
    architectures={"base": "ModernBertModel", "mlm": "ModernBertForMaskedLM"},
    config_from_hf=config_from_hf,
    config_to_hf=config_to_hf,
    params_from_hf=params_from_hf,
    params_to_hf=params_to_hf,
    mismatch=mismatch,
)
