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

import numpy as np

from encoder.interop import family as family_lib
from encoder.interop import families as families_lib
from encoder.interop.family import Unrepresentable
from encoder.model import scan


def read_config(folder: str) -> dict:
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{folder}: no config.json (expected a HuggingFace model folder)")
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None


def read_tensors(folder: str) -> dict[str, np.ndarray]:
    st = os.path.join(folder, "model.safetensors")
    if os.path.exists(st):
        from safetensors.numpy import load_file
        return {k: np.asarray(v, np.float32) for k, v in load_file(st).items()}
    pt = os.path.join(folder, "pytorch_model.bin")
    if os.path.exists(pt):
        import torch  # only for the legacy format
        state = torch.load(pt, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise FileNotFoundError(f"{folder}: expected model.safetensors or pytorch_model.bin")


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
    try:
        fam = family_of(hf)
        cfg = fam.config_from_hf(hf)
        params = _as_float32(fam.params_from_hf(read_tensors(folder), cfg))
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
