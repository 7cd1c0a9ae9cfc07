"""What a HuggingFace source was beyond the tensors an import maps, kept so that an export
of it (or of a run continued from it) is what the source was.

An HF folder says more than its encoder's weights: sentence-transformers' modules
(the pooling rule, a Normalize module, max_seq_length), its tokenizer's model_max_length
(the length its positions were trained to), BERT's pooler (a tensor an MLM run has no
place for) and task heads an import leaves out (a classifier and its labels). This
module reads that once and writes it beside what carries the model on:

    hf_origin.json         {"source", "sentence_transformers": {pooling, normalize,
                           max_seq_length, unsupported} or null, "model_max_length",
                           "pooler": bool, "dropped": [tensor names]}
    hf_origin_pooler.npz   the source's pooler: kernel [D, D], bias [D] (when it has one)

`python -m encoder import_hf` writes both into the params folder; a run started from a
source (init_from) copies them into its workdir (`carry`), so a continued run passes them
on; `python -m encoder export` reads them (`of_source`).
"""
import json
import os
import re
import shutil

import numpy as np

ORIGIN = "hf_origin.json"
POOLER = "hf_origin_pooler.npz"

# sentence-transformers' Pooling modes this codebase computes, by its own names.
ST_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
            "pooling_mode_max_tokens": "max"}
ST_KNOWN = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize")

# Task heads an HF checkpoint may carry that an import leaves out (this codebase's task
# heads are trained by its own fine-tuning): named when dropped, never silently.
HEAD_TENSORS = re.compile(r"^(classifier|qa_outputs|sop_classifier|score)\.|"
                          r"(^|\.)cls\.seq_relationship\.")
_POOLER = re.compile(r"^((bert|roberta)\.)?pooler\.dense\.(weight|bias)$")
# HF writes a huge number for "no limit" (int(1e30)) into tokenizer_config.json
NO_LIMIT = 1_000_000


def _json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def sentence_transformers(folder: str) -> dict | None:
    """{pooling, normalize, max_seq_length, unsupported} from an HF folder's modules.json
    (None: not a sentence-transformers folder). unsupported: the modules (or Pooling mode)
    this codebase does not compute, e.g. a Dense layer."""
    modules = _json(os.path.join(folder, "modules.json"))
    if not isinstance(modules, list):
        return None
    out = {"pooling": "", "normalize": False, "max_seq_length": None, "unsupported": []}
    for m in modules:
        kind, path = m.get("type", ""), m.get("path", "")
        if kind.endswith(".Pooling"):
            cfg = _json(os.path.join(folder, path, "config.json")) or {}
            on = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
            if len(on) == 1 and on[0] in ST_MODES:
                out["pooling"] = ST_MODES[on[0]]
            else:
                out["unsupported"].append(f"Pooling {'+'.join(on) or '(no mode)'}")
        elif kind.endswith(".Normalize"):
            out["normalize"] = True
        elif kind not in ST_KNOWN:
            out["unsupported"].append(f"{kind.rsplit('.', 1)[-1]} ({path or 'top'})")
    length = (_json(os.path.join(folder, "sentence_bert_config.json")) or {}).get(
        "max_seq_length")
    out["max_seq_length"] = int(length) if isinstance(length, int) else None
    return out


def model_max_length(folder: str) -> int | None:
    """tokenizer_config.json's model_max_length (None where absent or HF's 'no limit')."""
    n = (_json(os.path.join(folder, "tokenizer_config.json")) or {}).get("model_max_length")
    return int(n) if isinstance(n, (int, float)) and 0 < n < NO_LIMIT else None


def tensor_names(folder: str) -> list[str]:
    """The names of an HF folder's tensors (safetensors: from its header alone)."""
    st = os.path.join(folder, "model.safetensors")
    if os.path.exists(st):
        from safetensors import safe_open
        with safe_open(st, "np") as f:
            return list(f.keys())
    from encoder.interop import hf
    return list(hf.read_tensors(folder))


def dropped_heads(names: list[str], params: dict) -> list[str]:
    """The task-head tensors the import left out (and a pooler the family did not map)."""
    out = [n for n in names if HEAD_TENSORS.search(n)]
    if "pooler" not in params:
        out += [n for n in names if "pooler." in n and n not in out]
    return sorted(out)


def labels(folder: str) -> list[str]:
    """config.json's label names (id2label in id order), [] when it has none."""
    id2label = (_json(os.path.join(folder, "config.json")) or {}).get("id2label") or {}
    try:
        return [str(id2label[k]) for k in sorted(id2label, key=int)]
    except (TypeError, ValueError):
        return []


def describe_dropped(folder: str, dropped: list[str]) -> str:
    """One line naming what an import left out, or '' when nothing was."""
    if not dropped:
        return ""
    arch = ", ".join((_json(os.path.join(folder, "config.json")) or {}).get(
        "architectures") or []) or "the checkpoint"
    names = labels(folder)
    shown = ", ".join(dropped[:6]) + (f", ... ({len(dropped)} tensors)" if len(dropped) > 6
                                      else "")
    return (f"left out of the import: {arch}'s task head ({shown}"
            + (f"; labels {', '.join(names)}" if names and len(names) <= 20 else "")
            + "): this codebase trains its own task heads (python -m encoder run "
            "--config=experiments/finetune.py)")


def of_hf_folder(folder: str, params: dict | None = None) -> dict:
    """The record of an HF folder (params: what its import mapped, for what it dropped)."""
    names = tensor_names(folder)
    return {"source": os.path.abspath(folder),
            "sentence_transformers": sentence_transformers(folder),
            "model_max_length": model_max_length(folder),
            "pooler": any(_POOLER.match(n) for n in names),
            "dropped": dropped_heads(names, params) if params is not None else []}


def hf_pooler(folder: str) -> dict | None:
    """The pooler of an HF folder as our Dense {'kernel' [in, out], 'bias'}, read alone."""
    st = os.path.join(folder, "model.safetensors")
    if os.path.exists(st):
        from safetensors import safe_open
        with safe_open(st, "np") as f:
            found = {_POOLER.match(n).group(3): n for n in f.keys() if _POOLER.match(n)}
            if set(found) != {"weight", "bias"}:
                return None
            w, b = f.get_tensor(found["weight"]), f.get_tensor(found["bias"])
    else:
        from encoder.interop import hf
        t = hf.read_tensors(folder)
        found = {_POOLER.match(n).group(3): n for n in t if _POOLER.match(n)}
        if set(found) != {"weight", "bias"}:
            return None
        w, b = t[found["weight"]], t[found["bias"]]
    return {"kernel": np.asarray(w, np.float32).T, "bias": np.asarray(b, np.float32)}


def write(out: str, record: dict, pooler: dict | None = None) -> None:
    os.makedirs(out, exist_ok=True)
    if pooler is not None:
        np.savez(os.path.join(out, POOLER), kernel=np.asarray(pooler["kernel"]),
                 bias=np.asarray(pooler["bias"]))
    with open(os.path.join(out, ORIGIN), "w") as f:
        json.dump({**record, "pooler": pooler is not None or bool(record.get("pooler"))}, f,
                  indent=1)


def read(folder: str) -> dict | None:
    record = _json(os.path.join(folder, ORIGIN))
    return record if isinstance(record, dict) else None


def read_pooler(folder: str) -> dict | None:
    path = os.path.join(folder, POOLER)
    if not os.path.exists(path):
        return None
    with np.load(path) as z:
        return {"kernel": np.asarray(z["kernel"]), "bias": np.asarray(z["bias"])}


def _folder(init_from: str) -> str:
    """A source's folder: hf:DIR's DIR, WORKDIR@STEP's WORKDIR."""
    if init_from.startswith("hf:"):
        return init_from[3:]
    path, sep, at = init_from.rpartition("@")
    return path if sep and at.isdigit() else init_from


def of_source(init_from: str) -> tuple[dict | None, dict | None]:
    """(record, pooler) of any source: an HF folder read now; a params folder or workdir
    from what its import or run kept (None, None where it kept nothing: a model of this
    codebase's own)."""
    folder = _folder(init_from)
    if init_from.startswith("hf:"):
        record = of_hf_folder(folder)
        return record, hf_pooler(folder) if record["pooler"] else None
    return read(folder), read_pooler(folder)


def carry(init_from: str, workdir: str) -> None:
    """A run started from init_from keeps the source's record (and pooler) in its workdir,
    so its export, and a run continued from it, know what the source was. Once: a
    restart keeps what the first start wrote."""
    if not init_from or os.path.exists(os.path.join(workdir, ORIGIN)):
        return
    folder = _folder(init_from)
    if not init_from.startswith("hf:") and os.path.exists(os.path.join(folder, ORIGIN)):
        for name in (ORIGIN, POOLER):  # a params folder's or workdir's: copied as it is
            if os.path.exists(os.path.join(folder, name)):
                shutil.copy(os.path.join(folder, name), os.path.join(workdir, name))
        return
    record, pooler = of_source(init_from)
    if record is not None:
        write(workdir, record, pooler)
