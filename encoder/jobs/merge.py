"""Weight averages and checkpoint merging: many checkpoints in, one params folder out.

    python -m encoder merge --workdirs=A,B@2000,... --out=DIR [--method=average|weighted]
        [--weights=0.5,0.3,0.2] [--last=K] [--tree=params|ema]

Each entry is a pretraining workdir (its newest checkpoint), WORKDIR@STEP (that step),
or, with --last=K, a workdir's K newest checkpoints (the steps of one run: a
"latest weight average", Sanyal et al. 2023). The inputs must be one model: the same
parameter tree and shapes, the same model config (runtime fields aside: attention
kernel, remat, layer scan) and the same tokenizer (by content); anything else is refused
with what differs. --tree=ema averages the runs' parameter EMAs (train.ema_decay > 0)
instead of their parameters, which is how an EMA becomes the exported or fine-tuned model.

METHODS (one table):
  average   the uniform mean, theta = (1/n) sum_i theta_i (model soups, Wortsman et
            al. 2022; NeoBERT's and mmBERT's merges of decay-phase variants)
  weighted  sum_i w_i theta_i with --weights normalised to sum 1

The output is a params folder (model_config.json + params/ + tokenizer/ + merge.json
naming every input), which is a valid init_from for pretraining, fine-tuning,
evaluation and export (encoder/checkpoints/sources.py).
"""
import json
import os
from typing import Callable

import jax
import ml_collections
import numpy as np

from encoder import errors, registry
from encoder.checkpoints import sources, store
from encoder.data.tokenization import tokenization, tokenization_diff
from encoder.train import phases as phases_lib

RUNTIME_FIELDS = ("attention_impl", "remat", "scan_layers", "dtype")  # not part of the weights
TREES = ("params", "ema")


def _average(trees: list, weights) -> dict:
    w = np.full(len(trees), 1.0 / len(trees))
    return _weighted(trees, w)


def _weighted(trees: list, weights) -> dict:
    w = np.asarray(weights, np.float64)
    if len(w) != len(trees):
        raise ValueError(f"--weights has {len(w)} values for {len(trees)} checkpoints")
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"--weights must be >= 0 with a positive sum, got {list(w)}")
    w = w / w.sum()
    # float64 accumulation: the mean of n float32 trees is exact to float32.
    return jax.tree.map(lambda *xs: np.asarray(sum(wi * np.asarray(x, np.float64)
                                                   for wi, x in zip(w, xs)),
                                               np.asarray(xs[0]).dtype), *trees)


# name -> (trees, weights) -> merged tree
METHODS: dict[str, Callable] = {"average": _average, "weighted": _weighted}


def parse_entries(workdirs: str, last: int = 0) -> list[tuple[str, int | None]]:
    """'A,B@2000' -> [(A, None), (B, 2000)]; --last=K expands a bare A into its K newest."""
    if last < 0:
        raise errors.UsageError(f"--last={last}: expected 0 (each workdir's newest checkpoint) "
                                "or K > 0 (its K newest)")
    out = []
    for item in filter(None, (s.strip() for s in workdirs.split(","))):
        path, sep, step = item.rpartition("@") if "@" in item else (item, "", "")
        if sep and not step.isdigit():
            raise ValueError(f"--workdirs entry {item!r}: expected WORKDIR or WORKDIR@STEP")
        if item.startswith("hf:"):
            raise errors.UsageError(
                f"--workdirs entry {item!r}: merge averages checkpoints of this codebase's "
                "pretraining workdirs, and an HF folder is none; continue it first (python -m "
                f"encoder run --config=experiments/continue.py --config.init_from={item} ...)")
        if not os.path.isdir(path):
            raise FileNotFoundError(f"--workdirs entry {item!r}: {path} is not a folder")
        if sep:
            out.append((path, int(step)))
        elif last > 0:
            mngr = store.manager(path, create=False)
            have = sorted(mngr.all_steps())
            mngr.close()
            if not have:
                raise FileNotFoundError(f"{path}: no checkpoint")
            if len(have) < last:
                raise errors.UsageError(
                    f"--last={last}: {path} has {len(have)} checkpoint"
                    f"{'s' if len(have) != 1 else ''} (steps {have}); give --last={len(have)} "
                    "or fewer")
            out.extend((path, s) for s in have[-last:])
        else:
            out.append((path, None))
    if not out:
        raise ValueError("--workdirs names no checkpoint")
    _refuse_repeats([(os.path.realpath(p), s) for p, s in out], "--workdirs names")
    return out


def _refuse_repeats(keys: list, what: str) -> None:
    """One checkpoint twice would be counted (and weighted) twice while merge.json names two
    inputs: refused."""
    seen = set()
    for path, step in keys:
        if (path, step) in seen:
            name = f"{path}@{step}" if step is not None else f"{path} (its newest checkpoint)"
            raise errors.UsageError(f"{what} {name} twice: each checkpoint once (an "
                                    "average of one checkpoint counted twice is not an "
                                    "average of two; use --method=weighted to weigh it)")
        seen.add((path, step))


def parse_weights(weights: str, method: str, n: int) -> list[float]:
    """--weights as numbers, checked before any checkpoint is read: one per checkpoint, >= 0,
    a positive sum, and only with --method=weighted (--method=average weighs every
    checkpoint 1/n: weights given beside it would be recorded but not applied)."""
    if not weights:
        if method == "weighted":
            raise errors.UsageError("--method=weighted needs --weights (one per checkpoint)")
        return [1.0] * n
    if method != "weighted":
        raise errors.UsageError(f"--weights={weights} applies to --method=weighted; "
                                f"--method={method} weighs every checkpoint 1/{n}: add "
                                "--method=weighted or drop --weights")
    try:
        w = [float(x) for x in weights.split(",")]
    except ValueError:
        raise errors.UsageError(f"--weights={weights}: expected comma-separated numbers, "
                                "one per checkpoint") from None
    if len(w) != n:
        raise errors.UsageError(f"--weights has {len(w)} values for {n} checkpoints")
    if not all(np.isfinite(w)) or min(w) < 0 or sum(w) <= 0:
        raise errors.UsageError(f"--weights must be >= 0 with a positive sum, got {weights}")
    return w


# ------------------------------------------------------------------ tokenization
# What defines a tokenization, not the file's bytes: a sentencepiece .model also records
# how it was trained (the temporary input file's path, the thread count), so two runs of
# one config never have byte-identical models although their pieces are the same.

def _find_ema(opt_state, params):
    """The EMA tree inside a restored optimizer state (any container form), or None."""
    if isinstance(opt_state, dict):
        if "ema" in opt_state and sources.shapes_match(opt_state["ema"], params):
            return opt_state["ema"]
        children = opt_state.values()
    elif isinstance(opt_state, (list, tuple)):
        if hasattr(opt_state, "ema") and sources.shapes_match(opt_state.ema, params):
            return opt_state.ema
        children = opt_state
    else:
        return None
    for c in children:
        found = _find_ema(c, params)
        if found is not None:
            return found
    return None


def load_checkpoint(workdir: str, step: int | None, tree: str = "params"):
    """(run config, params or EMA tree, step) of one pretraining checkpoint."""
    config_path = os.path.join(workdir, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{workdir}: not a pretraining workdir (no config.json)")
    with open(config_path) as f:
        run = ml_collections.ConfigDict(json.load(f))
    if run.get("mode", "pretrain") != "pretrain":
        raise ValueError(f"{workdir}: a {run.mode} workdir; merge takes pretraining workdirs")
    mngr = store.manager(workdir, create=False)
    try:
        if step is not None and step not in mngr.all_steps():
            raise FileNotFoundError(f"{workdir}: no checkpoint at step {step} (it has "
                                    f"{sorted(mngr.all_steps())})")
        state, _, _, got = store.restore(mngr, step=step, set_aside=False)
    finally:
        mngr.close()
    params = state["params"]
    if tree == "ema":
        ema = _find_ema(state["opt_state"], params)
        if ema is None:
            raise ValueError(f"{workdir}@{got}: the checkpoint keeps no parameter EMA (the run "
                             "had train.ema_decay=0); use --tree=params")
        params = ema
    return run, params, got


def model_at(run, step: int):
    """The model config a checkpoint at `step` was trained with: its phase's (a run in
    phases may change model fields, e.g. ModernBERT's RoPE base at its context extension)."""
    if not run.get("phases"):
        return run.model
    plan = phases_lib.plan(run)
    return plan.phase_at(max(step - 1, 0)).config.model


def _phase_name(run, step: int) -> str:
    if not run.get("phases"):
        return ""
    return f" (phase {phases_lib.plan(run).phase_at(max(step - 1, 0)).name!r})"


def _model_diff(a, b) -> list[str]:
    fa = {k: v for k, v in a.to_dict().items() if k not in RUNTIME_FIELDS}
    fb = {k: v for k, v in b.to_dict().items() if k not in RUNTIME_FIELDS}
    return [f"model.{k}: {fa.get(k, '<absent>')!r} vs {fb.get(k, '<absent>')!r}"
            for k in sorted(set(fa) | set(fb)) if fa.get(k, "<absent>") != fb.get(k, "<absent>")]


def _shape_diff(a, b, path="") -> str | None:
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)):
            return path or "/"
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k} (only in one)"
            d = _shape_diff(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if tuple(np.shape(a)) != tuple(np.shape(b)):
        return f"{path}: {tuple(np.shape(a))} vs {tuple(np.shape(b))}"
    return None


def merge(workdirs: str, out: str, method: str = "average", weights: str = "",
          last: int = 0, tree: str = "params") -> dict:
    """Merges the checkpoints into the params folder `out`; returns merge.json's record."""
    return _merge(workdirs, out, method, weights, last, tree)


def _merge(workdirs: str, out: str, method: str, weights: str, last: int,
           tree: str) -> dict:
    merge_fn = registry.lookup(METHODS, method, "merge method")
    registry.lookup({t: t for t in TREES}, tree, "merge tree")
    entries = parse_entries(workdirs, last)
    # --out is new, empty or an earlier merge's (merge.json): never a run or any other folder
    errors.check_output(out, "merge", "--out",
                        legacy=lambda d: os.path.isfile(os.path.join(d, "merge.json")))
    for path, _ in entries:
        if errors.inside(out, path) or errors.inside(path, out):
            raise errors.NotOurs(f"--out={out} is, contains or lies inside the input {path}")
    w = parse_weights(weights, method, len(entries))
    runs, trees, tokens, used = [], [], [], []
    for path, step in entries:
        run, params, got = load_checkpoint(path, step, tree)
        runs.append(run)
        trees.append(params)
        tokens.append(tokenization(sources._tokenizer_in(path, run)))
        used.append({"workdir": os.path.abspath(path), "step": int(got)})
    _refuse_repeats([(os.path.realpath(u["workdir"]), u["step"]) for u in used],
                    "--workdirs reaches")  # WORKDIR and WORKDIR@its newest step
    models = [model_at(run, u["step"]) for run, u in zip(runs, used)]
    for i in range(1, len(entries)):
        name = (f"{entries[i][0]}@{used[i]['step']}{_phase_name(runs[i], used[i]['step'])} and "
                f"{entries[0][0]}@{used[0]['step']}{_phase_name(runs[0], used[0]['step'])}")
        objectives = [r.get("objective", "mlm") for r in (runs[i], runs[0])]
        if objectives[0] != objectives[1]:
            raise ValueError(f"cannot merge {name}: different objectives ({objectives[0]} vs "
                             f"{objectives[1]}): their parameters are different models")
        diff = _model_diff(models[i], models[0])
        if diff:
            raise ValueError(f"cannot merge {name}: different models:\n  " + "\n  ".join(diff))
        shape = _shape_diff(trees[i], trees[0])
        if shape:
            raise ValueError(f"cannot merge {name}: parameter shapes differ at {shape}")
        differs = tokenization_diff(tokens[i], tokens[0])
        if differs:
            raise ValueError(f"cannot merge {name}: different tokenizers (the same token ids "
                             "would mean different text): " + "; ".join(differs[:4]) + (
                                 f"; and {len(differs) - 4} more" if len(differs) > 4 else ""))
    merged = merge_fn(trees, w)
    record = {"method": method, "tree": tree, "inputs": used,
              "weights": list(np.asarray(w) / np.sum(w))}
    errors.mark_output(out, "merge")
    # An earlier merge here stops being a complete folder first: a merge stopped while it
    # writes leaves no model_config.json beside a mix of the two (never an init_from).
    for name in ("model_config.json", "merge.json"):
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))
    # The tokenizer first: save_params writes model_config.json last (a complete folder).
    sources._tokenizer_in(entries[0][0], runs[0]).save(os.path.join(out, "tokenizer"))
    store.save_params(out, merged, models[0], extra={"merge.json": record})
    return record
