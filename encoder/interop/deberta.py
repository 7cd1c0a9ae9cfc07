"""HuggingFace DeBERTa-v2/v3 (He et al. 2021; 2023) <-> this codebase: the family's mapping table.

DeBERTa-v3 is our post-LN, GELU encoder with position='deberta' (disentangled
attention, encoder.model.positions.DisentangledPositions) and no absolute
positions. What the HF config says, and what it becomes here:
  * relative_attention=True, position_biased_input=False: position='deberta'
    (relative terms only; both at once is v2's optional mode, refused);
  * position_buckets / max_relative_positions (<1: max_position_embeddings):
    deberta_position_buckets / deberta_max_relative_positions;
  * pos_att_type 'p2c|c2p', share_att_key=True, norm_rel_ebd='layer_norm':
    the only combination the scheme computes (every released v3 checkpoint);
  * conv_kernel_size=0 (v3): v2-xlarge's convolution after layer 0 is refused;
  * type_vocab_size 0 (v3) or N: the segment table, as for BERT.

Layouts (HF Linear weights are [out, in]; ours [in, out]):
  attention.self.{query,key,value}_proj [D, D] -> attention.qkv.kernel [D, 3, H, K]
  attention.output.dense [D, D]               -> attention.out.kernel [H, K, D]
  deberta.encoder.rel_embeddings [2S, D]     -> relative_positions.embedding (in our encoder)
  deberta.encoder.LayerNorm                  -> relative_positions.norm
  MLM head: cls.predictions.* (config legacy=True, what a default config builds and what
  export writes) or lm_predictions.lm_head.* (legacy=False; same computation when the
  embedding width is the hidden width) -> mlm_head.{transform, transform_norm, output_bias}.
  (transformers 4.57's legacy=False head runs only with tie_word_embeddings=False: tying
  swaps its dense for the [V, D] word table. It multiplies by the word table either way.)

Known differences that change no real token (tests compare real positions):
DebertaV2Embeddings multiplies pad positions' embeddings by 0 and HF masks pad
queries too, so pad positions' outputs differ; and HF builds relative
positions from 0..T-1 whatever position_ids says, where we use position ids
(equal for ordinary rows; packed rows restart per document here).
"""
import numpy as np

from encoder import config as config_lib
from encoder.data import tokenizer as tokenizer_lib
from encoder.interop import bert, family
from encoder.interop.family import Unrepresentable

PREFIX = "deberta."
ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "relu": "relu"}
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
TERMS = {"c2p", "p2c"}
NEAREST = ("position=deberta, norm=post_ln, activation=gelu (head_activation the same), "
           "use_bias=True, embedding_size=0, tie_embeddings=True, no layer sharing or local "
           "window: the DeBERTa-v3 recipe (experiments/deberta_v3_base.py)")
LEGACY_MLM = {"dense": "cls.predictions.transform.dense",
              "norm": "cls.predictions.transform.LayerNorm", "bias": "cls.predictions.bias"}
LM_HEAD_MLM = {"dense": "lm_predictions.lm_head.dense", "norm": "lm_predictions.lm_head.LayerNorm",
               "bias": "lm_predictions.lm_head.bias"}


# ---------------------------------------------------------------- config

def _import_problems(hf: dict) -> list[str]:
    """What in a DebertaV2Config our deberta scheme cannot compute exactly."""
    found = []
    if not hf.get("relative_attention", False):
        found.append("relative_attention=False (an absolute-position DeBERTa-v2; import needs "
                     "relative_attention=true)")
    if hf.get("position_biased_input", True):
        found.append("position_biased_input=True (absolute positions added to the input as well "
                     "as relative attention; v3 sets it to false)")
    terms = hf.get("pos_att_type") or []
    if isinstance(terms, str):
        terms = [x.strip() for x in terms.lower().split("|")]
    if set(terms) != TERMS:
        found.append(f"pos_att_type={'|'.join(terms) or 'none'} (only 'p2c|c2p', both terms, "
                     "is computed)")
    if not hf.get("share_att_key", False):
        found.append("share_att_key=False (separate pos_key_proj/pos_query_proj; only keys and "
                     "queries shared with content, as v3, import)")
    norms = [x.strip() for x in str(hf.get("norm_rel_ebd", "none")).lower().split("|")]
    if "layer_norm" not in norms:
        found.append(f"norm_rel_ebd={hf.get('norm_rel_ebd', 'none')!r} (only 'layer_norm' on the "
                     "relative embeddings, as v3)")
    if hf.get("conv_kernel_size", 0) > 0:
        found.append(f"conv_kernel_size={hf['conv_kernel_size']} (the convolution layer of "
                     "DeBERTa-v2-xlarge/xxlarge is not implemented; v3 has none: 0)")
    width = hf.get("embedding_size", hf.get("hidden_size"))
    if width != hf.get("hidden_size"):
        found.append(f"embedding_size={width} != hidden_size (DeBERTa projects before its "
                     "LayerNorm, we after: only equal widths import)")
    head_size = hf.get("attention_head_size")
    if head_size is not None and head_size * hf["num_attention_heads"] != hf["hidden_size"]:
        found.append(f"attention_head_size={head_size} (heads must split hidden_size exactly)")
    act = hf.get("hidden_act", "gelu")
    if act not in ACT_FROM_HF:
        found.append(f"hidden_act={act!r} (known: {sorted(ACT_FROM_HF)})")
    if not hf.get("tie_word_embeddings", True) and hf.get("legacy", True):
        # legacy=False's head multiplies by the word embeddings whatever this flag says
        # (and in transformers 4.57 runs only with it False: tying replaces its dense).
        found.append("tie_word_embeddings=False with legacy=True (an untied cls.predictions "
                     "decoder; the DeBERTa MLM head imports tied)")
    return found


def config_from_hf(hf: dict):
    """A DebertaV2Config dict -> our model config; Unrepresentable on what we lack."""
    if hf.get("model_type", "deberta-v2") != "deberta-v2":
        raise Unrepresentable(f"model_type {hf['model_type']!r} is not DeBERTa-v2/v3 ('deberta' "
                              "v1 has a different attention layout)")
    family.require(hf, "DeBERTa-v2")
    found = _import_problems(hf)
    if found:
        raise Unrepresentable("this DeBERTa-v2 checkpoint does not import: " + "; ".join(found)
                              + ". Importable: relative_attention=true, position_biased_input="
                              "false, pos_att_type='p2c|c2p', share_att_key=true, norm_rel_ebd="
                              "'layer_norm', conv_kernel_size=0 (DeBERTa-v3)")
    cfg = config_lib.model_config("base")
    max_position = hf.get("max_position_embeddings", 512)
    reach = hf.get("max_relative_positions", -1)
    cfg.update(dict(
        size="hf", vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"], num_heads=hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"], embedding_size=0,
        type_vocab_size=hf.get("type_vocab_size", 0), max_position=max_position,
        position="deberta", deberta_position_buckets=max(hf.get("position_buckets", -1), 0),
        deberta_max_relative_positions=reach if reach >= 1 else max_position,
        norm="post_ln", activation=ACT_FROM_HF[hf.get("hidden_act", "gelu")],
        head_activation=ACT_FROM_HF[hf.get("hidden_act", "gelu")], use_bias=True,
        layer_norm_eps=hf.get("layer_norm_eps", 1e-7),
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        initializer_range=hf.get("initializer_range", 0.02), tie_embeddings=True))
    return cfg


def _problems(cfg) -> list[str]:
    """What in our config DebertaV2Model cannot compute (empty: it exports exactly)."""
    get = cfg.get
    found = []
    if cfg.position != "deberta":
        found.append(f"position={cfg.position!r} (DeBERTa's attention is disentangled: 'deberta'; "
                     "learned positions export as bert/roberta, rope as roformer)")
    if cfg.norm != "post_ln":
        found.append(f"norm={cfg.norm!r} (DeBERTa is post-LN: 'post_ln'; pre-LN with RoPE and "
                     "GeGLU exports as modernbert)")
    if cfg.activation not in ACT_TO_HF:
        found.append(f"activation={cfg.activation!r} (no gated MLP: one of {sorted(ACT_TO_HF)})")
    if cfg.head_activation != cfg.activation:
        found.append(f"head_activation={cfg.head_activation!r} (the MLM head applies hidden_act: "
                     f"{cfg.activation!r})")
    if not cfg.use_bias:
        found.append("use_bias=False (every DeBERTa Linear and LayerNorm has a bias)")
    if cfg.embedding_size not in (0, cfg.hidden_size):
        found.append(f"embedding_size={cfg.embedding_size} (DeBERTa projects before its "
                     "embedding LayerNorm, we after: 0)")
    if cfg.share_layers:
        found.append("share_layers=True (every HF layer has its own weights)")
    if cfg.local_window:
        found.append(f"local_window={cfg.local_window} (DeBERTa attends globally: 0)")
    if not cfg.tie_embeddings:
        found.append("tie_embeddings=False (the DeBERTa MLM head is tied)")
    if not get("mlm_transform_bias", True):
        found.append("mlm_transform_bias=False (the MLM transform has a bias)")
    if not get("first_attention_norm", True) or get("local_rope_theta", 0.0):
        found.append("ModernBERT-only options (first_attention_norm / local_rope_theta)")
    return found


def mismatch(cfg) -> str:
    """Why cfg is not a DeBERTa-v2, or '' when it exports exactly."""
    return "; ".join(_problems(cfg))


def config_to_hf(cfg, info: dict | None = None) -> dict:
    """Our model config -> the complete DebertaV2Config dict (architectures aside)."""
    del info  # our special ids are fixed (encoder.data.tokenizer)
    found = _problems(cfg)
    if found:
        raise Unrepresentable(f"DeBERTa-v2 cannot represent {'; '.join(found)}. "
                              f"Nearest that exports: {NEAREST}")
    tok = tokenizer_lib
    return {
        "model_type": "deberta-v2",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "hidden_act": ACT_TO_HF[cfg.activation],
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_position,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_eps,
        "relative_attention": True,
        "position_biased_input": False,
        "position_buckets": cfg.deberta_position_buckets or -1,
        "max_relative_positions": cfg.deberta_max_relative_positions,
        "pos_att_type": ["p2c", "c2p"],
        "share_att_key": True,
        "norm_rel_ebd": "layer_norm",
        "conv_kernel_size": 0,
        "legacy": True,  # MLM head under cls.predictions.* (what a default config builds)
        "tie_word_embeddings": True,
        "pad_token_id": tok.PAD_ID,
        "unk_token_id": tok.UNK_ID,
        "cls_token_id": tok.CLS_ID,
        "sep_token_id": tok.SEP_ID,
        "mask_token_id": tok.MASK_ID,
        "bos_token_id": tok.CLS_ID,
        "eos_token_id": tok.SEP_ID,
        "torch_dtype": "float32",
    }


# ---------------------------------------------------------------- tensors

class _Tensors(dict):
    """A tensor dict whose missing key names the tensor (not a bare KeyError)."""

    def __missing__(self, key):
        raise ValueError(f"the checkpoint has no tensor {key!r} (it has {len(self)} tensors, "
                         f"e.g. {sorted(self)[:3]}): not a DeBERTa-v2 layout")


def _with_prefix(tensors: dict) -> dict:
    """DebertaV2Model keys have no 'deberta.' prefix; DebertaV2For* keys do. Add it."""
    if any(k.startswith(PREFIX) for k in tensors):
        return tensors
    return {PREFIX + k if k.startswith(("embeddings.", "encoder.")) else k: v
            for k, v in tensors.items()}


# A DeBERTa-v2 layer is a BERT layer whose projections are named query_proj / key_proj /
# value_proj (the relative-position terms reuse them: share_att_key).
DEBERTA_BLOCK = {**bert.BERT_BLOCK, "q": "attention.self.query_proj",
                 "k": "attention.self.key_proj", "v": "attention.self.value_proj"}


def _block_from_hf(t, p: str, cfg) -> dict:
    return bert.block_from_hf(t, cfg, p, DEBERTA_BLOCK, None)


def _block_to_hf(block: dict, p: str, cfg) -> dict:
    return bert.block_to_hf(block, cfg, p, DEBERTA_BLOCK, None)


def params_from_hf(tensors: dict, cfg) -> dict:
    """HF state-dict tensors (DebertaV2Model or ...ForMaskedLM) -> our params tree."""
    t = _Tensors({k: np.asarray(v, np.float32) for k, v in _with_prefix(tensors).items()})
    e = PREFIX + "embeddings"
    embed = {"token": {"embedding": t[f"{e}.word_embeddings.weight"]},
             "norm": family.norm_from_hf(t, f"{e}.LayerNorm")}
    if cfg.type_vocab_size:
        embed["segment"] = {"embedding": t[f"{e}.token_type_embeddings.weight"]}
    enc = {"embed": embed, "relative_positions": {
        "embedding": t[PREFIX + "encoder.rel_embeddings.weight"],
        "norm": family.norm_from_hf(t, PREFIX + "encoder.LayerNorm")}}
    for i in range(cfg.num_layers):
        enc[f"blocks_{i}"] = _block_from_hf(t, f"{PREFIX}encoder.layer.{i}", cfg)
    params = {"encoder": enc}
    for names in (LEGACY_MLM, LM_HEAD_MLM):
        if f"{names['dense']}.weight" in t:
            params["mlm_head"] = {"transform": family.linear_from_hf(t, names["dense"]),
                                  "transform_norm": family.norm_from_hf(t, names["norm"]),
                                  "output_bias": t[names["bias"]]}
    return params


def params_to_hf(params: dict, cfg, head: str = "mlm", info: dict | None = None) -> dict:
    """Our params -> HF tensors of DebertaV2Model ('base') or DebertaV2ForMaskedLM ('mlm')."""
    del info  # no fine-tuned heads: DeBERTa's classifiers pool through a ContextPooler we lack
    from encoder.model.encoder import encoder_params
    if head not in FAMILY.architectures:
        raise Unrepresentable(
            f"head {head!r}: DeBERTa-v2 exports {sorted(FAMILY.architectures)} (its "
            "classification heads pool through a dense + activation ContextPooler that none of "
            "our pooling rules computes); export the encoder alone with head='base'")
    if head == "mlm" and "mlm_head" not in params.get("params", params):
        raise Unrepresentable("head 'mlm' needs params['mlm_head'] (a MaskedLM's params; an "
                              "RTD model exports its discriminator with head='base')")
    found = _problems(cfg)
    if found:
        raise Unrepresentable(f"DeBERTa-v2 cannot represent {'; '.join(found)}. "
                              f"Nearest that exports: {NEAREST}")
    enc = encoder_params(params)
    emb = enc["embed"]
    e = PREFIX + "embeddings"
    out = {f"{e}.word_embeddings.weight": np.asarray(emb["token"]["embedding"])}
    if cfg.type_vocab_size:
        out[f"{e}.token_type_embeddings.weight"] = np.asarray(emb["segment"]["embedding"])
    out.update(family.norm_to_hf(emb["norm"], f"{e}.LayerNorm"))
    rel = enc["relative_positions"]
    out[PREFIX + "encoder.rel_embeddings.weight"] = np.asarray(rel["embedding"])
    out.update(family.norm_to_hf(rel["norm"], PREFIX + "encoder.LayerNorm"))
    for i in range(cfg.num_layers):
        out.update(_block_to_hf(enc[f"blocks_{i}"], f"{PREFIX}encoder.layer.{i}", cfg))
    if head == "base":  # DebertaV2Model: bare names
        out = {k[len(PREFIX):]: v for k, v in out.items()}
    else:
        mlm = params.get("params", params)["mlm_head"]
        out.update(family.linear_to_hf(mlm["transform"], LEGACY_MLM["dense"]))
        out.update(family.norm_to_hf(mlm["transform_norm"], LEGACY_MLM["norm"]))
        out[LEGACY_MLM["bias"]] = np.asarray(mlm["output_bias"])
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


FAMILY = family.Family(
    name="deberta",
    model_type="deberta-v2",
    architectures={"base": "DebertaV2Model", "mlm": "DebertaV2ForMaskedLM"},
    config_from_hf=config_from_hf,
    config_to_hf=config_to_hf,
    params_from_hf=params_from_hf,
    params_to_hf=params_to_hf,
    mismatch=mismatch,
)
