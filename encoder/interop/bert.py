"""The BERT-layout families: BERT, RoBERTa, ALBERT, ELECTRA and RoFormer.

All five are post-LN stacks of the same block (query/key/value Linears, an
output dense, GELU MLP, two LayerNorms); they differ in a few places, and
each difference is one field of `Layout`:
  * where positions come from: BERT/ALBERT/ELECTRA's learned table, RoBERTa's
    learned table offset by padding_idx + 1 (its position ids count from the
    pad id), RoFormer's rotary positions;
  * the E -> D projection of factorized embeddings (ALBERT, ELECTRA, RoFormer);
  * ALBERT's layer groups (one group shared by every layer, or one per layer);
  * the names of the MLM head and of the fine-tuned heads.

Layouts: HF Linear weights are [out, in], ours [in, out]; our attention
projection is one [D, 3, H, K] kernel, HF's three [D, D] weights; the output
projection is [H, K, D] here, [D, D] there.

RoFormer rotates channel pairs (2i, 2i+1) where we rotate (i, i + K/2) (the
GPT-NeoX / ModernBERT layout), at the same frequencies. The two differ by a
fixed permutation of each head's query and key channels, which leaves every
dot product q.k unchanged: export and import permute the query and key
projections, and the model computes exactly the same function.
"""
import dataclasses

import numpy as np

from encoder import config as config_lib
from encoder.interop import family as F
from encoder.interop.family import Unrepresentable

ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "relu": "relu"}
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}

BERT_BLOCK = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
              "o": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
              "wi": "intermediate.dense", "wo": "output.dense", "mlp_norm": "output.LayerNorm"}
ALBERT_BLOCK = {"q": "attention.query", "k": "attention.key", "v": "attention.value",
                "o": "attention.dense", "attention_norm": "attention.LayerNorm",
                "wi": "ffn", "wo": "ffn_output", "mlp_norm": "full_layer_layer_norm"}


@dataclasses.dataclass(frozen=True)
class Layout:
    prefix: str                 # the base model's attribute: 'bert', 'roberta', ...
    positions: str              # 'learned' | 'offset' (RoBERTa) | 'rotary' (RoFormer)
    projection: str | None      # the E -> D Linear's name (None: E must equal D)
    mlm: dict                   # {'dense', 'norm', 'bias', 'decoder'}: MLM head tensor names
    sequence: dict              # the sequence head: {'dense', 'out'} names and its 'pooling' rule
    albert: bool = False        # layers live in albert_layer_groups
    head_activation: str = ""   # fixed by the HF class ('' = config.hidden_act)


BERT_MLM = {"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
            "bias": "cls.predictions.bias", "decoder": "cls.predictions.decoder"}

LAYOUTS = {
    "bert": Layout("bert", "learned", None, BERT_MLM,
                   {"dense": "bert.pooler.dense", "out": "classifier", "pooling": "cls_tanh"}),
    "roberta": Layout("roberta", "offset", None,
                      {"dense": "lm_head.dense", "norm": "lm_head.layer_norm",
                       "bias": "lm_head.bias", "decoder": "lm_head.decoder"},
                      {"dense": "classifier.dense", "out": "classifier.out_proj",
                       "pooling": "cls_tanh"},
                      head_activation="gelu"),
    "albert": Layout("albert", "learned", "albert.encoder.embedding_hidden_mapping_in",
                     {"dense": "predictions.dense", "norm": "predictions.LayerNorm",
                      "bias": "predictions.bias", "decoder": "predictions.decoder"},
                     {"dense": "albert.pooler", "out": "classifier", "pooling": "cls_tanh"},
                     albert=True),
    # ElectraForMaskedLM is the generator; its head's activation is always GELU.
    "electra": Layout("electra", "learned", "electra.embeddings_project",
                      {"dense": "generator_predictions.dense",
                       "norm": "generator_predictions.LayerNorm",
                       "bias": "generator_lm_head.bias", "decoder": "generator_lm_head"},
                      {"dense": "classifier.dense", "out": "classifier.out_proj",
                       "pooling": "cls_gelu"}, head_activation="gelu"),
    # RoFormer's classification head applies config.hidden_act: cls_gelu when that is GELU.
    "roformer": Layout("roformer", "rotary", "roformer.embeddings_project", BERT_MLM,
                       {"dense": "classifier.dense", "out": "classifier.out_proj",
                        "pooling": "cls_gelu"}),
}

def _prefix(name: str, layout: Layout) -> str:
    return f"{layout.prefix}.{name}"


def _block_name(layout: Layout, i: int, shared: bool) -> str:
    if layout.albert:
        return _prefix(f"encoder.albert_layer_groups.{0 if shared else i}.albert_layers.0",
                       layout)
    return _prefix(f"encoder.layer.{i}", layout)


def _rotary_permutation(head_dim: int) -> np.ndarray:
    """Our channel c -> RoFormer's channel: (i, i + K/2) pairs become (2i, 2i + 1)."""
    half = head_dim // 2
    c = np.arange(head_dim)
    return np.where(c < half, 2 * c, 2 * (c - half) + 1)


def rotary_table(num_positions: int, head_dim: int) -> np.ndarray:
    """RoFormer's embed_positions buffer: [P, K], sines of pair i in column i, cosines in
    column K/2 + i, frequency 10000^(-2i/K)."""
    pos = np.arange(num_positions, dtype=np.float64)[:, None]
    freq = 10000.0 ** (-2.0 * np.arange(head_dim // 2) / head_dim)
    return np.concatenate([np.sin(pos * freq), np.cos(pos * freq)], axis=1).astype(np.float32)


# ---------------------------------------------------------------- export

def block_to_hf(block: dict, cfg, name: str, names: dict, perm) -> dict:
    d, h = cfg.hidden_size, cfg.num_heads
    k = d // h
    att = block["attention"]
    qkv = np.asarray(att["qkv"]["kernel"])  # [D, 3, H, K]
    qkv_b = np.asarray(att["qkv"]["bias"])  # [3, H, K]
    out = {}
    for j, role in enumerate("qkv"):
        w, b = qkv[:, j], qkv_b[j]  # [D, H, K], [H, K]
        if perm is not None and role in "qk":
            w_hf, b_hf = np.empty_like(w), np.empty_like(b)
            w_hf[..., perm], b_hf[..., perm] = w, b
            w, b = w_hf, b_hf
        out[f"{name}.{names[role]}.weight"] = w.reshape(d, d).T
        out[f"{name}.{names[role]}.bias"] = b.reshape(d)
    out[f"{name}.{names['o']}.weight"] = np.asarray(att["out"]["kernel"]).reshape(h * k, d).T
    out[f"{name}.{names['o']}.bias"] = np.asarray(att["out"]["bias"])
    out.update(F.norm_to_hf(block["attention_norm"], f"{name}.{names['attention_norm']}"))
    out.update(F.linear_to_hf(block["mlp"]["wi"], f"{name}.{names['wi']}"))
    out.update(F.linear_to_hf(block["mlp"]["wo"], f"{name}.{names['wo']}"))
    out.update(F.norm_to_hf(block["mlp_norm"], f"{name}.{names['mlp_norm']}"))
    return out


def encoder_to_hf(enc: dict, cfg, layout: Layout, pad_id: int) -> dict:
    """Our encoder params -> the base model's tensors (prefixed names)."""
    emb = enc["embed"]
    width = cfg.embedding_size or cfg.hidden_size
    out = {_prefix("embeddings.word_embeddings.weight", layout): emb["token"]["embedding"]}
    if cfg.type_vocab_size:
        out[_prefix("embeddings.token_type_embeddings.weight", layout)] = emb["segment"]["embedding"]
    else:  # HF always adds a token-type row: one zero row adds nothing
        out[_prefix("embeddings.token_type_embeddings.weight", layout)] = np.zeros(
            (1, width), np.float32)
    if layout.positions == "learned":
        out[_prefix("embeddings.position_embeddings.weight", layout)] = emb["position"]["embedding"]
    elif layout.positions == "offset":
        table = np.asarray(emb["position"]["embedding"])
        out[_prefix("embeddings.position_embeddings.weight", layout)] = np.concatenate(
            [np.zeros((pad_id + 1, width), np.float32), table])
    else:
        out[_prefix("encoder.embed_positions.weight", layout)] = rotary_table(
            cfg.max_position, cfg.hidden_size // cfg.num_heads)
    out.update(F.norm_to_hf(emb["norm"], _prefix("embeddings.LayerNorm", layout)))
    if width != cfg.hidden_size:
        out.update(F.linear_to_hf(enc["embed_projection"], layout.projection))
    elif layout.albert:  # ALBERT always projects E -> D: with E == D, the identity is exact
        out.update(F.linear_to_hf({"kernel": np.eye(width, dtype=np.float32),
                                   "bias": np.zeros(width, np.float32)}, layout.projection))
    names = ALBERT_BLOCK if layout.albert else BERT_BLOCK
    perm = _rotary_permutation(cfg.hidden_size // cfg.num_heads) \
        if layout.positions == "rotary" else None
    if cfg.share_layers:
        out.update(block_to_hf(enc["shared_block"], cfg, _block_name(layout, 0, True), names, perm))
    else:
        for i in range(cfg.num_layers):
            out.update(block_to_hf(enc[f"blocks_{i}"], cfg, _block_name(layout, i, False),
                                    names, perm))
    return {k: np.asarray(v, np.float32) for k, v in out.items()}


def mlm_head_to_hf(head: dict, cfg, layout: Layout) -> dict:
    n = layout.mlm
    out = {**F.linear_to_hf(head["transform"], n["dense"]),
           **F.norm_to_hf(head["transform_norm"], n["norm"]),
           n["bias"]: np.asarray(head["output_bias"])}
    if not cfg.tie_embeddings:
        out[f"{n['decoder']}.weight"] = np.asarray(head["decoder"]["kernel"]).T
    return out


POOLING_FORMULAS = {"cls_tanh": "tanh(W h_[CLS] + b)", "cls_gelu": "gelu(W h_[CLS] + b)"}


def heads_to_hf(params: dict, cfg, layout: Layout, kind: str, pooling: str = "") -> dict:
    """The tensors of one head kind (params: the model's whole tree)."""
    if kind == "base":
        return F.linear_to_hf(params["pooler"]["dense"], _prefix("pooler.dense", layout)) \
            if "pooler" in params and layout.prefix in ("bert", "roberta") else {}
    if kind == "mlm":
        return mlm_head_to_hf(params["mlm_head"], cfg, layout)
    if kind == "rtd":
        head = params["rtd_head"]
        return {**F.linear_to_hf(head["dense"], "discriminator_predictions.dense"),
                **F.linear_to_hf(head["out"], "discriminator_predictions.dense_prediction")}
    head = params["head"]
    if kind == "sequence":
        want = layout.sequence["pooling"]
        if pooling != want or "pooler" not in head:
            raise Unrepresentable(
                f"{layout.prefix}'s sequence classifier pools with {POOLING_FORMULAS[want]} "
                f"(pooling={want}); this model was fine-tuned with pooling={pooling or '?'}. "
                f"Fine-tune with pooling={want} to export it as {layout.prefix} (cls_tanh: bert, "
                "roberta, albert; cls_gelu: electra, roformer), or export its encoder with "
                "--format=sentence-transformers, which keeps any pooling rule")
        if want == "cls_gelu" and cfg.activation != "gelu":
            raise Unrepresentable(f"{layout.prefix}'s classification head applies hidden_act "
                                  f"({cfg.activation}), not GELU")
        return {**F.linear_to_hf(head["pooler"]["dense"], layout.sequence["dense"]),
                **F.linear_to_hf(head["classifier"], layout.sequence["out"])}
    if kind == "token":
        return F.linear_to_hf(head["classifier"], "classifier")
    if kind == "span":
        return F.linear_to_hf(head["span"], "qa_outputs")
    raise ValueError(f"unknown head kind {kind!r}; known: {F.HEAD_KINDS}")


def mismatch(cfg, name: str) -> str:
    """Why `name` cannot represent cfg ('' when it can), naming the nearest that can."""
    layout = LAYOUTS[name]
    want_pos = {"learned": "learned", "offset": "learned", "rotary": "rope"}[layout.positions]
    if cfg.norm != "post_ln":
        return (f"norm={cfg.norm}: the BERT-layout families are post-LN; a pre-LN model with "
                "RoPE and GeGLU without biases exports as ModernBERT (--family=modernbert)")
    if cfg.position != want_pos:
        nearest = {"learned": "bert, roberta, albert or electra", "rope": "roformer"}.get(
            cfg.position, "none (HF has no post-LN encoder with "
            f"position={cfg.position}); use position=learned (BERT) or rope (RoFormer)")
        return f"position={cfg.position}, {name} needs {want_pos}; nearest family: {nearest}"
    if cfg.position == "rope" and cfg.rope_theta != 10000.0:
        return f"rope_theta={cfg.rope_theta}: RoFormer's rotary frequencies use 10000"
    if cfg.activation not in ACT_TO_HF:
        return (f"activation={cfg.activation}: {name} has no gated MLP (GeGLU/SwiGLU export "
                "as ModernBERT, with pre-LN and RoPE)")
    head_act = layout.head_activation or cfg.activation
    if cfg.head_activation != head_act:
        return (f"head_activation={cfg.head_activation}: {name}'s MLM head applies {head_act} "
                f"(set model.head_activation={head_act})")
    if not cfg.use_bias:
        return f"use_bias=False: {name}'s layers all have biases (ModernBERT has none)"
    if cfg.local_window:
        return f"local_window={cfg.local_window}: {name} attends globally (ModernBERT alternates)"
    if (cfg.embedding_size or cfg.hidden_size) != cfg.hidden_size and layout.projection is None:
        return (f"embedding_size={cfg.embedding_size} < hidden_size: {name} has no embedding "
                "projection (ALBERT and ELECTRA do)")
    if cfg.share_layers and not layout.albert:
        return "share_layers=True: only ALBERT shares its layers (--family=albert)"
    if (cfg.get("first_attention_norm", True) is False or cfg.get("local_rope_theta", 0.0)
            or cfg.get("mlm_transform_bias", True) is False):
        return ("ModernBERT-only options are set (first_attention_norm / local_rope_theta / "
                "mlm_transform_bias)")
    return ""


def config_to_hf(cfg, name: str, pad_id: int = 0) -> dict:
    why = mismatch(cfg, name)
    if why:
        raise Unrepresentable(f"{name} cannot represent this model: {why}")
    layout = LAYOUTS[name]
    width = cfg.embedding_size or cfg.hidden_size
    hf = {"vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
          "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
          "intermediate_size": cfg.intermediate_size, "hidden_act": ACT_TO_HF[cfg.activation],
          "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
          "max_position_embeddings": cfg.max_position + (pad_id + 1 if layout.positions == "offset"
                                                         else 0),
          "type_vocab_size": max(cfg.type_vocab_size, 1), "initializer_range": cfg.initializer_range,
          "layer_norm_eps": cfg.layer_norm_eps, "pad_token_id": pad_id,
          "tie_word_embeddings": bool(cfg.tie_embeddings), "position_embedding_type": "absolute"}
    if layout.projection is not None:
        hf["embedding_size"] = width
    if layout.albert:
        hf.update(num_hidden_groups=1 if cfg.share_layers else cfg.num_layers, inner_group_num=1,
                  classifier_dropout_prob=cfg.dropout)
    if layout.positions == "rotary":
        hf["rotary_value"] = False
    return hf


def params_to_hf(params: dict, cfg, name: str, kind: str, pad_id: int = 0,
                 pooling: str = "") -> dict:
    """Our params (encoder + the head of `kind`) -> HF tensors."""
    from encoder.model.encoder import encoder_params
    layout = LAYOUTS[name]
    out = encoder_to_hf(encoder_params(params), cfg, layout, pad_id)
    out.update(heads_to_hf(params, cfg, layout, kind, pooling))
    return out


# ---------------------------------------------------------------- import

def block_from_hf(t: dict, cfg, name: str, names: dict, perm) -> dict:
    d, h = cfg.hidden_size, cfg.num_heads
    k = d // h
    ws, bs = [], []
    for role in "qkv":
        w = np.asarray(t[f"{name}.{names[role]}.weight"]).T.reshape(d, h, k)
        b = np.asarray(t[f"{name}.{names[role]}.bias"]).reshape(h, k)
        if perm is not None and role in "qk":
            w, b = w[..., perm], b[..., perm]
        ws.append(w)
        bs.append(b)
    return {
        "attention": {
            "qkv": {"kernel": np.stack(ws, axis=1), "bias": np.stack(bs)},  # [D, 3, H, K]
            "out": {"kernel": np.asarray(t[f"{name}.{names['o']}.weight"]).T.reshape(h, k, d),
                    "bias": np.asarray(t[f"{name}.{names['o']}.bias"])},
        },
        "attention_norm": F.norm_from_hf(t, f"{name}.{names['attention_norm']}"),
        "mlp": {"wi": F.linear_from_hf(t, f"{name}.{names['wi']}"),
                "wo": F.linear_from_hf(t, f"{name}.{names['wo']}")},
        "mlp_norm": F.norm_from_hf(t, f"{name}.{names['mlp_norm']}"),
    }


def _with_prefix(tensors: dict, layout: Layout) -> dict:
    """Bare *Model checkpoints have no 'bert.' prefix; *For* ones do. Add it."""
    head = layout.prefix + "."
    if any(k.startswith(head) for k in tensors):
        return tensors
    roots = ("embeddings.", "encoder.", "pooler.", "embeddings_project.")
    return {head + k if k.startswith(roots) else k: v for k, v in tensors.items()}


def params_from_hf(tensors: dict, cfg, name: str) -> dict:
    layout = LAYOUTS[name]
    t = _Tensors(_with_prefix(tensors, layout))
    emb = {"token": {"embedding": t[_prefix("embeddings.word_embeddings.weight", layout)]},
           "norm": F.norm_from_hf(t, _prefix("embeddings.LayerNorm", layout))}
    if cfg.type_vocab_size:
        emb["segment"] = {"embedding": t[_prefix("embeddings.token_type_embeddings.weight", layout)]}
    if layout.positions != "rotary":
        table = t[_prefix("embeddings.position_embeddings.weight", layout)]
        # RoBERTa: the first pad_id + 1 rows are never used (positions count from the pad id)
        emb["position"] = {"embedding": table[len(table) - cfg.max_position:]}
    enc = {"embed": emb}
    if (cfg.embedding_size or cfg.hidden_size) != cfg.hidden_size:
        enc["embed_projection"] = F.linear_from_hf(t, layout.projection)
    elif layout.albert:
        _check_identity_projection(F.linear_from_hf(t, layout.projection))
    names = ALBERT_BLOCK if layout.albert else BERT_BLOCK
    perm = _rotary_permutation(cfg.hidden_size // cfg.num_heads) \
        if layout.positions == "rotary" else None
    if cfg.share_layers:
        enc["shared_block"] = block_from_hf(t, cfg, _block_name(layout, 0, True), names, perm)
    else:
        for i in range(cfg.num_layers):
            enc[f"blocks_{i}"] = block_from_hf(t, cfg, _block_name(layout, i, False), names, perm)
    params = {"encoder": enc}
    n = layout.mlm
    if f"{n['dense']}.weight" in t:
        params["mlm_head"] = {"transform": F.linear_from_hf(t, n["dense"]),
                              "transform_norm": F.norm_from_hf(t, n["norm"]),
                              "output_bias": t[n["bias"]]}
        if not cfg.tie_embeddings:
            params["mlm_head"]["decoder"] = {"kernel": t[f"{n['decoder']}.weight"].T}
    pooler = _prefix("pooler.dense", layout) if not layout.albert else "albert.pooler"
    if f"{pooler}.weight" in t:
        params["pooler"] = {"dense": F.linear_from_hf(t, pooler)}
    if "discriminator_predictions.dense.weight" in t:
        params["rtd_head"] = {
            "dense": F.linear_from_hf(t, "discriminator_predictions.dense"),
            "out": F.linear_from_hf(t, "discriminator_predictions.dense_prediction")}
    return params


def _check_identity_projection(dense: dict) -> None:
    """ALBERT with embedding_size == hidden_size still has an E -> D Linear; our model has
    none at E == D, so only the identity (what export writes) imports exactly."""
    kernel = dense["kernel"]
    if not (np.allclose(kernel, np.eye(kernel.shape[0])) and not np.any(dense["bias"])):
        raise Unrepresentable(
            "ALBERT with embedding_size == hidden_size and a trained embedding projection: "
            "our model projects only when embedding_size < hidden_size (its weights would be "
            "dropped); not imported")


class _Tensors(dict):
    """A tensor dict whose missing key names the tensor (not a bare KeyError)."""

    def __missing__(self, key):
        raise ValueError(f"the checkpoint has no tensor {key!r} (it has {len(self)} tensors, "
                         f"e.g. {sorted(self)[:3]})")


def config_from_hf(hf: dict, name: str):
    """HF config dict -> our model config. Refuses what we cannot compute."""
    layout = LAYOUTS[name]
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise Unrepresentable(f"position_embedding_type={hf['position_embedding_type']!r} is "
                              "not supported; only 'absolute' checkpoints import")
    F.require(hf, name)
    act = hf.get("hidden_act", "gelu")
    if act not in ACT_FROM_HF:
        raise Unrepresentable(f"hidden_act {act!r} not supported; known: {sorted(ACT_FROM_HF)}")
    if layout.positions == "rotary" and hf.get("rotary_value", False):
        raise Unrepresentable("rotary_value=True (RoFormer rotating values too) is not supported")
    if layout.albert:
        groups, inner = hf.get("num_hidden_groups", 1), hf.get("inner_group_num", 1)
        if inner != 1 or groups not in (1, hf["num_hidden_layers"]):
            raise Unrepresentable(
                f"ALBERT with num_hidden_groups={groups}, inner_group_num={inner}: only one group "
                "shared by all layers, or one group per layer, import")
    cfg = config_lib.model_config("base")
    cfg.size = "hf"
    cfg.vocab_size = hf["vocab_size"]
    cfg.hidden_size = hf["hidden_size"]
    cfg.num_layers = hf["num_hidden_layers"]
    cfg.num_heads = hf["num_attention_heads"]
    cfg.intermediate_size = hf["intermediate_size"]
    cfg.type_vocab_size = hf.get("type_vocab_size", 2)
    pad_id = hf.get("pad_token_id", 0 if name != "roberta" else 1) or 0
    positions = hf.get("max_position_embeddings", 512)
    cfg.max_position = positions - (pad_id + 1) if layout.positions == "offset" else positions
    cfg.activation = ACT_FROM_HF[act]
    cfg.head_activation = layout.head_activation or cfg.activation
    cfg.layer_norm_eps = hf.get("layer_norm_eps", 1e-12)
    cfg.dropout = hf.get("hidden_dropout_prob", 0.1)
    cfg.attention_dropout = hf.get("attention_probs_dropout_prob", 0.1)
    cfg.initializer_range = hf.get("initializer_range", 0.02)
    cfg.position = "rope" if layout.positions == "rotary" else "learned"
    cfg.norm = "post_ln"
    width = hf.get("embedding_size", cfg.hidden_size) if layout.projection else cfg.hidden_size
    cfg.embedding_size = 0 if width == cfg.hidden_size else width
    cfg.share_layers = bool(layout.albert and hf.get("num_hidden_groups", 1) == 1
                            and cfg.num_layers > 1)
    cfg.tie_embeddings = bool(hf.get("tie_word_embeddings", True))
    return cfg


def drop_empty_token_types(cfg, params) -> None:
    """A single all-zero token-type row adds nothing: it is how export writes 'none'."""
    seg = params["encoder"]["embed"].get("segment")
    if cfg.type_vocab_size == 1 and seg is not None and not np.any(seg["embedding"]):
        del params["encoder"]["embed"]["segment"]
        cfg.type_vocab_size = 0


def _family(name: str, architectures: dict) -> F.Family:
    def from_hf(hf):
        return config_from_hf(hf, name)

    def params_from(tensors, cfg):
        params = params_from_hf(tensors, cfg, name)
        drop_empty_token_types(cfg, params)
        return params

    return F.Family(
        name=name, model_type=name, architectures=architectures,
        config_from_hf=from_hf,
        config_to_hf=lambda cfg, info: config_to_hf(cfg, name, info.get("pad_id", 0)),
        params_from_hf=params_from,
        params_to_hf=lambda params, cfg, kind, info: params_to_hf(
            params, cfg, name, kind, info.get("pad_id", 0), info.get("pooling", "")),
        mismatch=lambda cfg: mismatch(cfg, name))


def _classes(stem: str, kinds: tuple) -> dict:
    suffix = {"base": "Model", "mlm": "ForMaskedLM", "rtd": "ForPreTraining",
              "sequence": "ForSequenceClassification", "token": "ForTokenClassification",
              "span": "ForQuestionAnswering"}
    return {k: stem + suffix[k] for k in kinds}


BERT = _family("bert", _classes("Bert", ("base", "mlm", "sequence", "token", "span")))
ROBERTA = _family("roberta", _classes("Roberta", ("base", "mlm", "sequence", "token", "span")))
ALBERT = _family("albert", _classes("Albert", ("base", "mlm", "sequence", "token", "span")))
ELECTRA = _family("electra", _classes("Electra", ("base", "mlm", "rtd", "sequence", "token",
                                                  "span")))
ROFORMER = _family("roformer", _classes("RoFormer", ("base", "mlm", "sequence", "token", "span")))
