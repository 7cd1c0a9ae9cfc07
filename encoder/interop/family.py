"""What one HuggingFace architecture family must say to import and export.

A family (BERT, RoBERTa, ALBERT, ELECTRA, RoFormer, ModernBERT, DeBERTa-v2)
is one module under encoder/interop/ that builds a `Family` and adds it to
`encoder.interop.families.FAMILIES`. The generic code (encoder/interop/hf.py)
does the rest: reading/writing config.json + model.safetensors, the tokenizer,
shape checks, choosing the family of a model, the CLI.

Conventions every family follows:
  * tensors are numpy float32 arrays named exactly as the HF PyTorch
    state_dict names them (with the base-model prefix, e.g. 'bert.'); Linear
    weights are [out, in];
  * our params trees are {'encoder': ..., 'mlm_head': ..., 'pooler': ...,
    'head': ...} as encoder.model.models builds them (see encoder/interop/bert.py);
  * anything our config cannot represent (import) or the HF class cannot
    represent (export) raises `Unrepresentable` naming what and, on export,
    the nearest combination that does export: never a folder that loads and
    computes something else.
"""
import dataclasses
from typing import Callable

import numpy as np

# The kinds of model an export can produce; each family lists the HF class for
# the kinds it supports (a kind it lacks is refused by name).
#   base: the bare encoder (last hidden state);        mlm: encoder + MLM head;
#   rtd: ELECTRA's discriminator (ElectraForPreTraining);
#   sequence / token / span: fine-tuned heads (classification or regression,
#   tagging, extractive QA).
HEAD_KINDS = ("base", "mlm", "rtd", "sequence", "token", "span")


class Unrepresentable(ValueError):
    """A model (or HF config) that the other side cannot represent exactly."""


@dataclasses.dataclass(frozen=True)
class Family:
    name: str                      # our name, e.g. 'roformer' (the --family flag)
    model_type: str                # HF config.json model_type
    architectures: dict            # head kind -> HF class name, e.g. {'mlm': 'BertForMaskedLM'}
    # hf config dict -> our model ConfigDict (raise Unrepresentable on what we lack)
    config_from_hf: Callable
    # (our model ConfigDict, info) -> hf config dict; info = {'pad_id', 'unk_id', 'cls_id',
    # 'sep_id', 'mask_id', 'kind', 'labels', 'pooling' (the run's rule)}; model_type, architectures and the
    # special-token ids are added by the caller (hf.write_folder). Raise Unrepresentable
    # naming the nearest supported combination.
    config_to_hf: Callable
    # (tensors: dict[str, np.ndarray], cfg) -> our params tree (whatever heads exist)
    params_from_hf: Callable
    # (params tree, cfg, head kind, info) -> dict[str, np.ndarray]
    params_to_hf: Callable
    # why a config is not this family's, or '' when it is (for choosing a family)
    mismatch: Callable = lambda cfg: "not checked"


# ---- small layout helpers shared by the family modules ----

def linear_to_hf(dense: dict, prefix: str) -> dict:
    """Our Dense {'kernel' [in, out], 'bias'} -> {prefix.weight [out, in], prefix.bias}."""
    out = {f"{prefix}.weight": np.asarray(dense["kernel"]).T}
    if "bias" in dense:
        out[f"{prefix}.bias"] = np.asarray(dense["bias"])
    return out


def linear_from_hf(t: dict, prefix: str, bias: bool = True) -> dict:
    out = {"kernel": np.asarray(t[f"{prefix}.weight"]).T}
    if bias:
        out["bias"] = np.asarray(t[f"{prefix}.bias"])
    return out


def norm_to_hf(norm: dict, prefix: str, weight: str = "weight", bias: str = "bias") -> dict:
    out = {f"{prefix}.{weight}": np.asarray(norm["scale"])}
    if "bias" in norm:
        out[f"{prefix}.{bias}"] = np.asarray(norm["bias"])
    return out


def norm_from_hf(t: dict, prefix: str, bias: bool = True, weight: str = "weight",
                 bias_name: str = "bias") -> dict:
    out = {"scale": np.asarray(t[f"{prefix}.{weight}"])}
    if bias:
        out["bias"] = np.asarray(t[f"{prefix}.{bias_name}"])
    return out


REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size")


def require(hf: dict, what: str, keys=REQUIRED) -> None:
    """A config.json without the sizes is not this family's: say which are missing."""
    missing = [k for k in keys if k not in hf]
    if missing:
        raise ValueError(f"config.json lacks {missing}: not a {what} config")
