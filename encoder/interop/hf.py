"""HuggingFace folders in and out: config.json + model.safetensors (+ tokenizer).

    load(folder) -> (model config, params)       # any family in families.FAMILIES
    write_folder(out, family, cfg, params, kind, tokenizer, labels)
    choose_family(cfg, kind) -> name              # the HF family that computes cfg exactly

The family modules (bert.py, modernbert.py, deberta.py) own the tensor names
and layouts; this module owns the files, the token ids in config.json, label
maps, shape checks, and the choice of family.
"""
import json
import os
import re

import numpy as np

from encoder import errors as errors_lib

from encoder.interop import family as family_lib
from encoder.interop import families as families_lib
from encoder.interop.family import Unrepresentable
from encoder.model import scan


def read_config(folder: str) -> dict:
    """config.json as a dict; a file that is not JSON (truncated, not UTF-8), not an object,
    or whose sizes are not positive integers is an error naming the file."""
    path = os.path.join(folder, "config.json")
    if os.path.isfile(folder):
        raise FileNotFoundError(f"{folder} is a file: give its folder "
                                f"{os.path.dirname(folder) or '.'} (a HuggingFace model folder)")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{folder}: no config.json (expected a HuggingFace model folder)")
    try:
        with open(path, encoding="utf-8") as f:
            hf = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg}, line {e.lineno}): the file is "
                         "truncated or was edited; copy it again from the model") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid UTF-8 (byte offset {e.start}); copy it again "
                         "from the model") from None
    if not isinstance(hf, dict):
        raise ValueError(f"{path}: expected a JSON object of the model's settings, got "
                         f"{type(hf).__name__}")
    _not_ours(folder, hf)
    for key in family_lib.REQUIRED:
        value = hf.get(key)
        if key in hf and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"{path}: {key} is {value!r}; expected a positive integer")
    return hf


def _not_ours(folder: str, config: dict) -> None:
    """A workdir or params folder of this codebase given where an HF folder is read."""
    if isinstance(config.get("model"), dict) and ("train" in config or "mode" in config):
        raise ValueError(f"{folder} is a workdir of this codebase, not a HuggingFace folder: "
                         f"give it as init_from={folder} (no hf:), or export it first "
                         "(python -m encoder export)")
    if os.path.isdir(os.path.join(folder, "params")) and os.path.isfile(
            os.path.join(folder, "model_config.json")):
        raise ValueError(f"{folder} is a params folder of this codebase, not a HuggingFace "
                         f"folder: give it as init_from={folder} (no hf:)")


def read_tensors(folder: str) -> dict[str, np.ndarray]:
    """The weights, float32 by name; a file that cannot be read whole (truncated, not a
    safetensors or PyTorch file) is an error naming it."""
    st = os.path.join(folder, "model.safetensors")
    if os.path.exists(st):
        from safetensors.numpy import load_file
        try:
            loaded = load_file(st)
        except Exception as e:  # noqa: BLE001 -- SafetensorError derives from Exception only
            raise ValueError(f"{st}: not a readable safetensors file ({e}; "
                             f"{os.path.getsize(st)} bytes): it is truncated or damaged; copy "
                             "it again from the model") from None
        return {k: np.asarray(v, np.float32) for k, v in loaded.items()}
    pt = os.path.join(folder, "pytorch_model.bin")
    if os.path.exists(pt):
        import torch  # only for the legacy format
        try:
            state = torch.load(pt, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 -- torch raises RuntimeError, EOFError, pickle's
            raise ValueError(f"{pt}: not a readable PyTorch checkpoint "
                             f"({errors_lib.one_line(str(e))[:200]}): it is truncated or "
                             "damaged; copy it again from the model") from None
        return {k: v.float().numpy() for k, v in state.items()}
    if os.path.isfile(os.path.join(folder, "config.json")):
        with open(os.path.join(folder, "config.json"), encoding="utf-8", errors="replace") as f:
            try:
                _not_ours(folder, json.load(f))
            except json.JSONDecodeError:
                pass
    if os.path.isfile(os.path.join(folder, "model_config.json")):
        _not_ours(folder, {})
    raise FileNotFoundError(f"{folder}: expected model.safetensors or pytorch_model.bin")


def check_finite(tensors: dict, folder: str) -> None:
    """Refuses weights holding NaN or infinity, naming each such tensor (its name in the
    folder's file): a model computed from them is NaN from its first step."""
    bad = [(name, found) for name, array in tensors.items()
           for found in [errors_lib.non_finite_counts(array)] if found]
    if bad:
        raise errors_lib.non_finite_source(f"hf:{folder}", bad, len(tensors))


_LAYER = re.compile(r"(?:^|\.)layers?\.(\d+)\.")  # BERT's ...layer.N., ModernBERT's layers.N.


def check_sizes(hf: dict, tensors: dict, folder: str) -> None:
    """config.json's sizes against the tensors it comes with, before any tensor is mapped:
    hidden_size (the width of every layer's norms) and num_hidden_layers (the layers the
    tensors number). A config.json edited or taken from another model is named with the
    size the weights have, not left to a tensor the mapping then cannot find (or, for
    fewer layers, to layers silently left out); the other sizes are check_shapes'."""
    path = os.path.join(folder, "config.json")

    def refuse(key, found, example):
        raise ValueError(f"{path}: {key} is {hf[key]}, but the weights in {folder} have "
                         f"{found} ({example}): config.json does not describe these weights "
                         f"(edited, or another model's); set {key} to {found}")

    norms = {k: v.shape for k, v in tensors.items() if "norm" in k.lower()
             and k.endswith(".weight") and re.search(r"\.\d+\.", k) and len(v.shape) == 1}
    widths = {shape[0] for shape in norms.values()}
    if "hidden_size" in hf and len(widths) == 1 and hf["hidden_size"] not in widths:
        name = min(norms)
        refuse("hidden_size", widths.pop(), f"{name} has shape {tuple(norms[name])}")
    layers = {int(m.group(1)) for k in tensors for m in [_LAYER.search(k)] if m}
    if "num_hidden_layers" in hf and layers and hf["num_hidden_layers"] != max(layers) + 1:
        refuse("num_hidden_layers", max(layers) + 1, f"layers 0 to {max(layers)}")


def family_of(hf: dict) -> family_lib.Family:
    model_type = hf.get("model_type", "bert")
    fam = families_lib.BY_MODEL_TYPE.get(model_type)
    if fam is None:
        raise Unrepresentable(f"model_type {model_type!r} is not supported; supported: "
                              f"{sorted(families_lib.BY_MODEL_TYPE)}")
    return fam


def load(folder: str):
    """Reads a HF folder of any supported family: (our model config, params)."""
    hf = read_config(folder)
    tensors = read_tensors(folder)
    check_finite(tensors, folder)
    check_sizes(hf, tensors, folder)
    try:
        fam = family_of(hf)
        cfg = fam.config_from_hf(hf)
        params = _as_float32(fam.params_from_hf(tensors, cfg))
        params = scan.stack_layers(params, cfg)  # the families write blocks_i; cfg may scan
        check_shapes(params, cfg)
    except ValueError as e:
        raise type(e)(f"{folder}: {e}") from None
    return cfg, params


def _as_float32(tree):
    if isinstance(tree, dict):
        return {k: _as_float32(v) for k, v in tree.items()}
    return np.asarray(tree, dtype=np.float32)


def check_shapes(params: dict, cfg) -> None:
    """Every imported encoder/MLM-head tensor against the shape cfg implies."""
    import jax
    from encoder.model import models
    model = models.MaskedLM(models.freeze(cfg))
    ids = np.ones((1, 4), np.int32)
    expected = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids * 0, ids,
                                                 mlm_positions=np.zeros((1, 1), np.int32)))
    expected = expected["params"]

    def walk(got, want, path):
        for k, v in got.items():
            if k not in want:
                continue  # e.g. the pooler, which the MLM model does not have
            if isinstance(v, dict):
                walk(v, want[k], f"{path}/{k}")
            else:
                shape = tuple(getattr(want[k], "value", want[k]).shape)
                if tuple(v.shape) != shape:
                    raise ValueError(f"tensor {path}/{k} has shape {tuple(v.shape)}, but "
                                     f"config.json implies {shape} (vocab_size, hidden_size, "
                                     "... disagree with the weights)")
    walk(params, expected, "")


def choose_family(cfg, kind: str = "mlm") -> str:
    """The first family that represents cfg exactly, or Unrepresentable with every reason."""
    if kind == "rtd":
        order = ["electra"]
    else:
        order = [n for n in families_lib.FAMILIES if n != "electra" or kind != "mlm"]
    reasons = {}
    for name in order:
        fam = families_lib.FAMILIES[name]
        if kind not in fam.architectures:
            reasons[name] = f"has no {kind} class"
            continue
        why = fam.mismatch(cfg)
        if not why:
            return name
        reasons[name] = why
    raise Unrepresentable("no HuggingFace family computes this model exactly:\n" + "\n".join(
        f"  {n}: {r}" for n, r in reasons.items()))


def token_info(tokenizer) -> dict:
    if tokenizer is None:
        from encoder.data import tokenizer as tokenizer_lib
        names = ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id")
        return dict(zip(names, (tokenizer_lib.PAD_ID, tokenizer_lib.UNK_ID, tokenizer_lib.CLS_ID,
                                tokenizer_lib.SEP_ID, tokenizer_lib.MASK_ID)))
    return {n: getattr(tokenizer, n) for n in ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id")}


def hf_config(fam, cfg, kind: str, info: dict, labels=None, problem_type: str = "") -> dict:
    """config.json for one family and head kind: the family's fields plus ids and labels."""
    if kind not in fam.architectures:
        raise Unrepresentable(f"{fam.name} has no HF class for a {kind} head; it exports "
                              f"{sorted(fam.architectures)}")
    hf = fam.config_to_hf(cfg, info)
    hf.update(model_type=fam.model_type, architectures=[fam.architectures[kind]],
              pad_token_id=info["pad_id"], bos_token_id=info["cls_id"],
              eos_token_id=info["sep_id"], cls_token_id=info["cls_id"],
              sep_token_id=info["sep_id"], mask_token_id=info["mask_id"],
              torch_dtype="float32")
    if labels is not None:
        hf["id2label"] = {str(i): str(name) for i, name in enumerate(labels)}
        hf["label2id"] = {str(name): i for i, name in enumerate(labels)}
        hf["num_labels"] = len(labels)
    if problem_type:
        hf["problem_type"] = problem_type
    return hf


def write_folder(out: str, family: str, cfg, params, kind: str = "mlm", tokenizer=None,
                 labels=None, problem_type: str = "", max_length: int = 512,
                 pooling: str = "") -> dict:
    """Writes out/config.json, out/model.safetensors and (given one) the tokenizer.

    Returns the config dict written. Raises Unrepresentable before writing anything
    when the family cannot compute the model exactly.
    """
    from safetensors.numpy import save_file
    fam = families_lib.FAMILIES.get(family)
    if fam is None:
        raise Unrepresentable(f"unknown family {family!r}; known: {sorted(families_lib.FAMILIES)}")
    info = {**token_info(tokenizer), "kind": kind, "labels": labels, "pooling": pooling}
    hf = hf_config(fam, cfg, kind, info, labels, problem_type)
    tensors = fam.params_to_hf(scan.unstack_layers(params), cfg, kind, info)  # reads blocks_i
    os.makedirs(out, exist_ok=True)
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf, f, indent=1)
    if tokenizer is not None:
        from encoder.interop import hf_tokenizer
        hf_tokenizer.write(tokenizer, out, max_length, token_types=cfg.type_vocab_size >= 2)
    return hf
