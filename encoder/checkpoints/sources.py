"""What a job can start from, behind one door: `load(init_from) -> Pretrained`.

  * a pretraining workdir of this codebase: its config.json, tokenizer and the
    newest checkpoint that restores (the whole model: encoder, heads, ELECTRA's
    generator);
  * a fine-tuning workdir: its best/ parameters (encoder + task head), its
    tokenizer and label names, so RTE can start from the MNLI model;
  * a params folder (model_config.json + params/, e.g. `encoder import_hf --out`);
  * hf:DIR, a HuggingFace folder of any family in encoder/interop/families.py
    (BERT, RoBERTa, ALBERT, ELECTRA, RoFormer, ModernBERT, DeBERTa-v2) with its tokenizer.

`merge_params` copies the subtrees a source has into a freshly initialised
model (shapes must match), which is how every job applies `init_from`.
"""
import dataclasses
import json
import os
from typing import Any

import jax
import ml_collections
import numpy as np

from encoder import errors
from encoder.checkpoints import store
from encoder.data import tokenizer as tokenizer_lib
from encoder.eval import identity
from encoder.model import scan

KINDS = ("pretraining", "finetuning", "params", "hf", "scratch")  # scratch: fine-tuning
# without init_from (encoder/jobs/finetune.py builds it)


@dataclasses.dataclass
class Pretrained:
    model_cfg: Any
    params: dict
    tokenizer: Any
    run_config: Any = None       # the source run's config (workdirs only)
    kind: str = "pretraining"    # one of KINDS
    task: str = ""               # fine-tuning workdirs: the task type
    labels: list | None = None   # fine-tuning workdirs: label names in head order


def _read_json(path: str):
    with open(path) as f:
        return json.load(f)


def _tokenizer_in(folder: str, run_config=None):
    """The tokenizer a workdir or params folder carries (DIR/tokenizer), or its config's."""
    configured = run_config.data.get("tokenizer", "") if run_config is not None else ""
    for path in (os.path.join(folder, "tokenizer", "sp.model"), os.path.join(folder, "tokenizer"),
                 configured):
        if path and os.path.exists(path):
            return tokenizer_lib.load(path)
    raise FileNotFoundError(f"{folder}: no tokenizer (expected {folder}/tokenizer/sp.model or a "
                            "WordPiece folder there)")


def split_step(init_from: str) -> tuple[str, int | None]:
    """'RUN@400' -> ('RUN', 400): a pretraining workdir's checkpoint at that step; a folder
    named 'RUN@400' (RUN no folder) is itself. Refused: 'RUN@abc' or 'RUN@' where RUN is a
    folder (naming its steps), and 'RUN@400' where both readings exist."""
    path, sep, step = init_from.rpartition("@")
    if not sep or not path or init_from.startswith("hf:"):
        return init_from, None
    named, workdir = os.path.exists(init_from), os.path.isdir(path)
    if step.isdigit() and named and workdir:
        raise ValueError(f"init_from={init_from!r} names two things: the folder "
                         f"{init_from} and step {step} of {path}; rename the folder (an "
                         "@ followed by a number reads as WORKDIR@STEP)")
    if step.isdigit() and not named:
        return path, int(step)
    if workdir and not named:
        raise ValueError(f"init_from={init_from!r}: @{step} is not a step: give WORKDIR@STEP "
                         f"with STEP a number ({path} has checkpoints at "
                         f"{identity.checkpoint_steps(path) or 'no step'})")
    return init_from, None


def check_init_fields(config) -> None:
    """init_from, init_step and init_fresh agree, before anything is read: init_fresh
    without a source, a prefix list naming nothing, WORKDIR@STEP against another init_step."""
    init_from, fresh = config.get("init_from", ""), config.get("init_fresh", "")
    if fresh and not init_from:
        raise ValueError(f"--config.init_fresh={fresh!r} needs --config.init_from: it names "
                         "what a source's checkpoint does not give (without one, every "
                         "tensor starts fresh)")
    if fresh and not fresh_prefixes(fresh):
        raise ValueError(f"--config.init_fresh={fresh!r} names no parameter path (give "
                         "prefixes like encoder/blocks_0,mlm_head; to start every tensor "
                         "fresh, drop init_from)")
    step = config.get("init_step", -1)
    if step >= 0 and not init_from:
        raise ValueError(f"--config.init_step={step} needs --config.init_from: the workdir "
                         "whose checkpoint at that step the run starts from")
    at = split_step(init_from)[1] if init_from else None
    if at is not None and step >= 0 and step != at:
        raise ValueError(f"--config.init_from={init_from} and --config.init_step={step} name "
                         f"two steps: give one (WORKDIR@STEP is init_step=STEP)")


def load(init_from: str) -> Pretrained:
    """Resolves any source this codebase writes or imports (a pretraining workdir's
    checkpoint at a step: WORKDIR@STEP); errors name what was expected. A source whose
    tensors hold NaN or infinity is refused, naming them (an HF folder's by their HF
    names, encoder/interop/hf.py)."""
    p = _load(init_from)
    if p.kind != "hf":
        check_finite(init_from, p.params)
    return p


def check_finite(source: str, params) -> None:
    """Refuses parameters holding NaN or infinity, naming each such tensor by its path."""
    import jax.numpy as jnp
    leaves = jax.tree_util.tree_leaves_with_path(params)
    bad = []
    for path, x in leaves:
        if not bool(jnp.all(jnp.isfinite(x))):  # on the device: a host copy only when bad
            name = "/" + "/".join(str(getattr(k, "key", k)) for k in path)
            bad.append((name, errors.non_finite_counts(np.asarray(x))))
    if bad:
        raise errors.non_finite_source(f"init_from {source}", bad, len(leaves))


def _run_config(init_from: str):
    """A workdir's run config (its config.json), refused when the folder is not a workdir
    of this codebase: the one resolver every job and export read a source's config with."""
    config_path = os.path.join(init_from, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"init_from={init_from!r}: expected a workdir with config.json, "
                                "a params folder (model_config.json + params/), or hf:DIR")
    raw = _read_json(config_path)
    if "model_type" in raw or "architectures" in raw:
        raise FileNotFoundError(f"init_from={init_from!r} is a HuggingFace folder: use "
                                f"hf:{init_from}")
    if "model" not in raw:
        raise FileNotFoundError(f"init_from={init_from!r}: its config.json is not a run config "
                                "of this codebase (no 'model'); a workdir from an older "
                                "version? re-run the job that wrote it")
    return ml_collections.ConfigDict(raw)


def _load(init_from: str) -> Pretrained:
    init_from, step = split_step(init_from)
    if step is not None and (not os.path.isdir(init_from) or store.is_params_folder(init_from)):
        raise ValueError(f"init_from={init_from}@{step}: @STEP names a checkpoint of a "
                         "pretraining workdir; this is not one")
    if init_from.startswith("hf:"):
        from encoder.interop import hf
        folder = init_from[3:]
        cfg, params = hf.load(folder)
        _say_dropped(folder, params)
        return Pretrained(cfg, params, tokenizer_lib.load(folder), kind="hf")
    if not os.path.isdir(init_from):
        raise FileNotFoundError(f"init_from={init_from!r} does not exist: expected a workdir of "
                                "this codebase, a params folder, or hf:DIR")
    if store.is_params_folder(init_from):
        cfg, params = store.load_params(init_from)
        return Pretrained(cfg, params, _tokenizer_in(init_from), kind="params")
    run = _run_config(init_from)
    if run.get("mode", "pretrain") == "finetune":
        return _finetuned(init_from, run)
    mngr = store.manager(init_from, create=False)
    try:
        if mngr.latest_step() is None:
            raise FileNotFoundError(f"init_from={init_from!r}: no checkpoint in its workdir")
        if step is not None and step not in mngr.all_steps():
            raise FileNotFoundError(f"init_from={init_from}@{step}: no checkpoint at step "
                                    f"{step} (it has {sorted(mngr.all_steps())})")
        state, _, _, _ = store.restore(mngr, step=step, set_aside=False)  # another run's
    finally:
        mngr.close()
    return Pretrained(run.model, state["params"], _tokenizer_in(init_from, run), run)


_SAID: set = set()  # the HF folders whose dropped heads this process has named


def _say_dropped(folder: str, params) -> None:
    """An HF folder's task head (a classifier and its labels) is not imported: said once,
    naming its tensors (encoder/interop/origin.py)."""
    from encoder.interop import origin
    if folder in _SAID:
        return
    _SAID.add(folder)
    line = origin.describe_dropped(folder, origin.dropped_heads(origin.tensor_names(folder),
                                                                params))
    if line and jax.process_index() == 0:
        print(f"init_from hf:{folder}: {line}", flush=True)


def load_tokenizer(init_from: str):
    """The tokenizer of a source alone (no parameter is read): for checks before a job
    prepares anything."""
    init_from, _ = split_step(init_from)  # WORKDIR@STEP: the workdir's tokenizer
    if init_from.startswith("hf:"):
        return tokenizer_lib.load(init_from[3:])
    config_path = os.path.join(init_from, "config.json")
    run = (ml_collections.ConfigDict(_read_json(config_path))
           if os.path.exists(config_path) and not store.is_params_folder(init_from) else None)
    return _tokenizer_in(init_from, run if run is not None and "model" in run else None)


def model_config(init_from: str):
    """The model config of a source alone (no parameter is read)."""
    init_from, _ = split_step(init_from)
    if init_from.startswith("hf:"):
        from encoder.interop import hf
        raw = hf.read_config(init_from[3:])
        return hf.family_of(raw).config_from_hf(raw)
    if store.is_params_folder(init_from):
        return ml_collections.ConfigDict(_read_json(os.path.join(init_from, "model_config.json")))
    if not os.path.isdir(init_from):
        load(init_from)  # raises the error that names what a source must be
    run = _run_config(init_from)  # an HF folder without hf: is named as one, as load does
    if run.get("mode", "pretrain") == "finetune":
        return ml_collections.ConfigDict(_read_json(os.path.join(init_from, "best",
                                                                 "model_config.json")))
    return run.model


def tokenizer_path(init_from: str) -> str:
    """The path tokenizer.load reads a source's tokenizer from."""
    init_from, _ = split_step(init_from)  # WORKDIR@STEP: the workdir's tokenizer
    if init_from.startswith("hf:"):
        return init_from[3:]
    for path in (os.path.join(init_from, "tokenizer", "sp.model"),
                 os.path.join(init_from, "tokenizer")):
        if os.path.exists(path):
            return path
    load_tokenizer(init_from)  # raises naming what is missing
    config = _read_json(os.path.join(init_from, "config.json"))
    return config["data"]["tokenizer"]


def fill_from_source(config, defaults) -> list[str]:
    """A config whose model fields are unset (placeholders, experiments/continue.py) takes
    them from its init_from source, and its tokenizer (data.tokenizer) too where unset;
    fields the user set stay and are checked against the source later (check_architecture).
    `defaults`: the values of fields the source's config lacks. Returns what was taken."""
    unset = [k for k, v in config.model.items() if v is None]
    if not unset:
        return []
    if not config.init_from:
        raise ValueError("this experiment takes its model from a source: give "
                         "--config.init_from=hf:DIR, a workdir or a params folder")
    src = model_config(config.init_from)
    for k in unset:
        config.model[k] = src[k] if k in src else defaults[k]
    taken = [f"model ({len(unset)} fields)"]
    if not config.data.tokenizer:
        config.data.tokenizer = tokenizer_path(config.init_from)
        taken.append(f"tokenizer ({config.data.tokenizer})")
    return taken


def _finetuned(workdir: str, run) -> Pretrained:
    best = os.path.join(workdir, "best")
    if not store.is_params_folder(best):
        raise FileNotFoundError(f"init_from={workdir!r}: a fine-tuning workdir without best/ "
                                "(the run has not finished an epoch)")
    cfg, params = store.load_params(best)
    labels_path = os.path.join(best, "labels.json")
    labels = _read_json(labels_path) if os.path.exists(labels_path) else None
    return Pretrained(cfg, params, _tokenizer_in(workdir), run, kind="finetuning",
                      task=run.get("task", ""), labels=labels)


@dataclasses.dataclass
class LoadReport:
    """What applying a source did: leaves loaded, leaves the model has that the source
    lacks (they start fresh), leaves the source has that the model has no place for."""
    loaded: list = dataclasses.field(default_factory=list)
    fresh: list = dataclasses.field(default_factory=list)
    unused: list = dataclasses.field(default_factory=list)
    reset: list = dataclasses.field(default_factory=list)  # the source has them; init_fresh
    #                                                        asked for a fresh start

    def summary(self, source: str) -> str:
        def some(paths):
            return ", ".join(paths[:4]) + (f" (+{len(paths) - 4} more)" if len(paths) > 4 else "")
        line = f"init_from {source}: {len(self.loaded)} tensors loaded"
        if self.fresh:
            line += f"; fresh: {some(self.fresh)}"
        if self.reset:
            line += f"; started fresh by init_fresh: {some(self.reset)}"
        if self.unused:
            line += f"; unused from the source: {some(self.unused)}"
        return line

    def check(self, source: str, may_start_fresh: dict, may_go_unused: dict,
              allowed: str = "") -> list[str]:
        """Refuses a fresh or unused leaf that no rule explains; returns the explanation of
        each that one does. The rules map a path prefix to its reason (a new head, a task's
        head); `allowed` is the user's comma-separated list of prefixes (init_fresh)."""
        user = {p: "--config.init_fresh" for p in fresh_prefixes(allowed)}
        every = self.loaded + self.fresh + self.unused + self.reset
        for prefix in user:  # a typo would silently load what it meant to reset
            if not any(_under(path, [prefix]) for path in every):
                tops = sorted({"/".join(p.strip("/").split("/")[:2]) for p in every})
                raise ValueError(f"--config.init_fresh={prefix}: no parameter of the model or "
                                 f"of {source} lies under it; its paths start "
                                 f"{', '.join(tops[:12])}" + (" ..." if len(tops) > 12 else ""))
        said, refused = [], []
        for kind, paths, rules in (("fresh", self.fresh, may_start_fresh),
                                   ("unused", self.unused, may_go_unused)):
            for path in paths:
                reason = next((why for prefix, why in {**rules, **user}.items()
                               if path.strip("/") == prefix or
                               path.strip("/").startswith(prefix + "/")), None)
                if reason is None:
                    refused.append((path, 'the source lacks it' if kind == 'fresh'
                                    else 'the model has no place for it'))
                elif f"{kind}: {reason}" not in said:
                    said.append(f"{kind}: {reason}")
        if refused:
            raise ValueError(
                f"init_from {source} does not fit this model: {refused_summary(refused)}. "
                "It is a different architecture (set the model as the source has it), or "
                "list the prefixes that may start fresh or go unused in --config.init_fresh")
        return said


def refused_summary(refused: list[tuple[str, str]], most: int = 4) -> str:
    """The refused leaves grouped by top-level module ('the source lacks all 43 under
    /generator'), then the first few by path: a whole missing half reads as one."""
    import collections
    groups = collections.Counter((p.strip("/").split("/")[0], why) for p, why in refused)
    parts = [f"{n} tensor{'s' * (n > 1)} under /{top} "
             f"({why.replace(' it', ' them') if n > 1 else why})"
             for (top, why), n in groups.most_common()]
    first = "; ".join(f"{p} ({why})" for p, why in refused[:most])
    return ", ".join(parts) + f" (first: {first}" + (" ...)" if len(refused) > most else ")")


def fresh_prefixes(allowed: str) -> list[str]:
    """init_fresh's comma-separated path prefixes (encoder/blocks_0,mlm_head)."""
    return [p.strip().strip("/") for p in (allowed or "").split(",") if p.strip().strip("/")]


def _under(path: str, prefixes) -> bool:
    path = path.strip("/")
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def _leaf_paths(tree, path: str) -> list[str]:
    if not isinstance(tree, dict):
        return [path or "/"]
    return [p for k, v in tree.items() for p in _leaf_paths(v, f"{path}/{k}")]


def merge_params(params, loaded, shardings=None, strict: bool = False, path: str = "",
                 report: LoadReport | None = None, fresh: tuple = ()):
    """params with every subtree that `loaded` also has replaced; shapes must match.

    strict: every parameter of `params` must be in `loaded` (an encoder taken
    from a source must be whole, never silently part random). report: filled with what
    was loaded, what starts fresh and what in `loaded` went unused. fresh: path prefixes
    (init_fresh) kept at the model's initialisation even where the source has them.
    """
    if fresh and path and _under(path, fresh):
        if report is not None:
            report.reset += _leaf_paths(params, path)
        return params
    if not isinstance(params, dict):
        if tuple(params.shape) != tuple(np.shape(loaded)):
            raise ValueError(f"init_from: {path or '/'} has shape {np.shape(loaded)}, the model "
                             f"expects {tuple(params.shape)}")
        value = np.asarray(loaded, params.dtype)
        if report is not None:
            report.loaded.append(path or "/")
        return jax.device_put(value, shardings) if shardings is not None else value
    if not isinstance(loaded, dict):
        raise ValueError(f"init_from: {path or '/'} is a single array, the model expects a tree")
    loaded = scan.match_layout(params, loaded)  # scanned <-> unrolled layers, either way
    missing = [k for k in params if k not in loaded]
    if strict and missing:
        raise ValueError(f"init_from: the source lacks {path}/{missing[0]} (and "
                         f"{len(missing) - 1} more): it is a different architecture")
    if report is not None:
        report.fresh += [p for k in missing for p in _leaf_paths(params[k], f"{path}/{k}")]
        report.unused += [p for k in loaded if k not in params
                          for p in _leaf_paths(loaded[k], f"{path}/{k}")]
    return {k: merge_params(v, loaded[k], None if shardings is None else shardings[k], strict,
                            f"{path}/{k}", report, fresh) if k in loaded else v
            for k, v in params.items()}


# Model fields that do not change the function a checkpoint computes (how it runs, how it
# is regularised, a label), or are checked by the parameters' shapes.
RUNTIME_FIELDS = ("dropout", "attention_dropout", "dtype", "attention_impl", "remat",
                  "scan_layers", "size", "max_position", "vocab_size", "real_vocab_size",
                  "initializer_range")


def architecture_differences(source_cfg, model_cfg, allowed: str = "") -> list[str]:
    """'field: model X, source Y' for every field of the model that computes a different
    function than the source's parameters were trained for (a field the source's config
    does not have is not compared); `allowed` lists fields changed knowingly."""
    ok = {f.strip() for f in allowed.split(",") if f.strip()}
    src = source_cfg.to_dict() if hasattr(source_cfg, "to_dict") else dict(source_cfg)
    out = []
    for k, v in model_cfg.items():
        if k in RUNTIME_FIELDS or k in ok or k not in src or hasattr(v, "items"):
            continue
        if src[k] != v and not (isinstance(v, float) and isinstance(src[k], (int, float))
                                and abs(float(src[k]) - v) <= 1e-12 * max(1.0, abs(v))):
            out.append(f"model.{k}: {v!r} here, {src[k]!r} in the source")
    return out


def check_architecture(source: str, source_cfg, model_cfg, allowed: str = "") -> None:
    diffs = architecture_differences(source_cfg, model_cfg, allowed)
    if diffs:
        raise ValueError(f"init_from {source}: its parameters compute another model than "
                         f"this config: {'; '.join(diffs)}. Set these as the source has them, "
                         "or name the fields you change knowingly in --config.init_allow")


def check_tokenizer(source: str, source_tok, tok, what: str) -> None:
    """The run's tokenizer must be the source's: ids mean tokens only through it (the
    same file, or the same tokenization trained apart: encoder/data/tokenization.py)."""
    from encoder.data import tokenization
    if source_tok.fingerprint() != tok.fingerprint() and (
            tokenization.tokenization(source_tok) != tokenization.tokenization(tok)):
        raise ValueError(f"init_from {source} was trained with another tokenizer than {what} "
                         f"(vocabularies of {source_tok.vocab_size} and {tok.vocab_size} ids, "
                         f"fingerprints {source_tok.fingerprint()[:12]} and "
                         f"{tok.fingerprint()[:12]}): give the source's tokenizer "
                         "(data.tokenizer) and prepare the corpus with it")


def merge_rows(params, loaded, shardings, path: str = ""):
    """params with a smaller head's entries in place: a leaf whose last (classes) axis is
    longer than the loaded one keeps its fresh entries past the loaded ones (a label map
    extended by new labels: the old rows keep their meaning, the new start fresh); every
    other dimension must match, as merge_params asks."""
    if isinstance(params, dict):
        if not isinstance(loaded, dict):
            raise ValueError(f"init_from: {path or '/'} is a single array, the model expects "
                             "a tree")
        return {k: merge_rows(v, loaded[k], shardings[k], f"{path}/{k}") if k in loaded else v
                for k, v in params.items()}
    old, new = tuple(np.shape(loaded)), tuple(params.shape)
    if old == new:
        return merge_params(params, loaded, shardings, path=path)
    if not old or old[:-1] != new[:-1] or old[-1] > new[-1]:
        raise ValueError(f"init_from: {path or '/'} has shape {old}, the model expects {new} "
                         "(only a longer last axis, more classes, can take a smaller head)")
    value = np.asarray(loaded, params.dtype)
    return jax.jit(lambda fresh, v: fresh.at[..., :old[-1]].set(v),
                   out_shardings=shardings)(params, value)


def shapes_match(a, b) -> bool:
    """True when two trees have the same keys and leaf shapes."""
    sa = jax.tree_util.tree_structure(a)
    return sa == jax.tree_util.tree_structure(b) and all(
        tuple(np.shape(x)) == tuple(np.shape(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
