"""What a score scored: the identity of a checkpoint and of data files, cheap enough to take
for every score (else a suite rerun can report a step-20 score as the step-60 model's).

`source_identity(init_from)` names a model as every job loads it (encoder/checkpoints/
sources.py), without loading it:

    pretraining workdir   its newest checkpoint step (or `step`, or WORKDIR@STEP's), a
                          sha256 over that step's
                          checkpoint files and the tokenizer, and its run record's hash
    fine-tuning workdir   a sha256 over best/ (parameters, head, labels) and the tokenizer,
                          the step best.json names
    params folder         a sha256 over model_config.json, params/, tokenizer/ (every file
                          but hidden ones: the output marker holds times)
    hf:DIR                a sha256 over every file of the folder (config, weights,
                          tokenizer), hidden ones aside

`files_identity({name: path})` hashes data files. A HashCache keeps each file's hash by
(size, mtime) so a rerun does not re-read an unchanged file (corpus.fingerprint's rule).
`changes(old, new)` says what differs between two identities in words, `describe` one
identity in a line a table can carry.
"""
import hashlib
import json
import os

SHORT = 16  # hex digits shown and compared (64 bits)
COMPARED = ("kind", "step", "sha256")  # what makes two identities one model


class HashCache:
    """path -> [size, mtime_ns, sha256] kept in a JSON file (None: in memory only)."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.entries: dict = {}
        if path and os.path.exists(path):
            try:
                with open(path) as f:
                    self.entries = json.load(f)
            except (OSError, ValueError):
                self.entries = {}

    def sha256(self, path: str) -> str:
        path = os.path.abspath(path)
        st = os.stat(path)
        was = self.entries.get(path)
        if was and was[0] == st.st_size and was[1] == st.st_mtime_ns:
            return was[2]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        self.entries[path] = [st.st_size, st.st_mtime_ns, h.hexdigest()]
        return h.hexdigest()

    def save(self) -> None:
        if not self.path:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.entries, f)
        os.replace(tmp, self.path)


def _files_under(path: str) -> list[str]:
    """Every regular file at or under path, sorted, hidden files and folders left out."""
    if os.path.isfile(path):
        return [path]
    out = []
    for d, dirs, names in os.walk(path):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        out += [os.path.join(d, n) for n in sorted(names)
                if not n.startswith(".") and not n.endswith(".tmp") and n != "LOCK"]
    return out


def content_sha256(paths: list[str], root: str, cache: HashCache | None = None) -> str:
    """One sha256 over the files under `paths` (each named relative to root, so a copy of a
    folder elsewhere hashes the same)."""
    cache = cache or HashCache()
    h = hashlib.sha256()
    for p in paths:
        for f in _files_under(p):
            rel = os.path.relpath(f, root)
            h.update(f"{rel}\0{cache.sha256(f)}\n".encode())
    return h.hexdigest()[:SHORT]


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _tokenizer_path(folder: str, run: dict | None) -> str | None:
    """The tokenizer a workdir or params folder carries (sources._tokenizer_in's order)."""
    configured = ((run or {}).get("data") or {}).get("tokenizer", "")
    for p in (os.path.join(folder, "tokenizer"), configured):
        if p and os.path.exists(p):
            return p
    return None


def checkpoint_steps(workdir: str) -> list[int]:
    """The steps of a run's complete checkpoints (orbax's own folders, no tmp ones)."""
    folder = os.path.join(workdir, "checkpoints")
    if not os.path.isdir(folder):
        return []
    return sorted(int(d) for d in os.listdir(folder) if d.isdigit()
                  and os.path.isdir(os.path.join(folder, d)))


def _run_hash(workdir: str) -> str | None:
    record = _read_json(os.path.join(workdir, "run.json"))
    if not record:
        return None
    text = json.dumps({"config": record.get("config"), "data": record.get("data")},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:SHORT]


def source_identity(init_from: str, cache: HashCache | None = None,
                    step: int | None = None) -> dict:
    """{init_from, kind, step, sha256, (run)} of a model source (module docstring); step
    picks a pretraining workdir's checkpoint (None: its newest, what a job loads)."""
    cache = cache or HashCache()
    out = {"init_from": init_from}
    # WORKDIR@STEP names a pretraining workdir's checkpoint (encoder/checkpoints/sources.py
    # split_step; its rule repeated here: this module stays free of jax for the baselines)
    path, sep, at = init_from.rpartition("@")
    if sep and at.isdigit() and not init_from.startswith("hf:"):
        init_from, step = path, int(at) if step is None else step
    if init_from.startswith("hf:"):
        folder = init_from[3:]
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"init_from={init_from!r}: {folder} is not a folder")
        return {**out, "kind": "hf", "step": None,
                "sha256": content_sha256([folder], folder, cache)}
    if not os.path.isdir(init_from):
        raise FileNotFoundError(f"init_from={init_from!r} does not exist: expected a workdir of "
                                "this codebase, a params folder, or hf:DIR")
    if os.path.exists(os.path.join(init_from, "model_config.json")) and os.path.isdir(
            os.path.join(init_from, "params")):
        return {**out, "kind": "params", "step": None,
                "sha256": content_sha256([init_from], init_from, cache)}
    run = _read_json(os.path.join(init_from, "config.json"))
    if not isinstance(run, dict) or "model" not in run:
        raise FileNotFoundError(f"init_from={init_from!r}: expected a workdir with config.json, "
                                "a params folder (model_config.json + params/), or hf:DIR")
    tokenizer = _tokenizer_path(init_from, run)
    extra = [tokenizer] if tokenizer else []
    if run.get("mode", "pretrain") == "finetune":
        best = os.path.join(init_from, "best")
        if not os.path.isdir(best):
            raise FileNotFoundError(f"init_from={init_from!r}: a fine-tuning workdir without "
                                    "best/ (the run has not finished an epoch)")
        row = _read_json(os.path.join(init_from, "best.json")) or {}
        return {**out, "kind": "finetuning", "step": row.get("step"),
                "sha256": content_sha256([best] + extra, init_from, cache),
                "run": _run_hash(init_from)}
    steps = checkpoint_steps(init_from)
    if step is None:
        if not steps:
            raise FileNotFoundError(f"init_from={init_from!r}: no checkpoint in its workdir")
        step = steps[-1]
    elif step not in steps:
        raise FileNotFoundError(f"init_from={init_from!r}: no checkpoint at step {step} (it "
                                f"has {steps})")
    ckpt = os.path.join(init_from, "checkpoints", str(step))
    return {**out, "kind": "pretraining", "step": int(step),
            "sha256": content_sha256([ckpt] + extra, init_from, cache),
            "run": _run_hash(init_from)}


def files_identity(files: dict, cache: HashCache | None = None) -> dict:
    """{name: {path, sha256}} of data files (an empty path is left out)."""
    cache = cache or HashCache()
    return {name: {"path": os.path.abspath(p), "sha256": cache.sha256(p)[:SHORT]}
            for name, p in files.items() if p}


def corpus_identity(spec: str, cache: HashCache | None = None) -> dict:
    """{path, sha256} of a pretraining corpus spec: a prepared folder by its manifest
    (plan, tokenizer, shard checksums: encoder.data.corpus.fingerprint), the embedded one
    by the interpreter, text files, globs and folders by each file's content."""
    from encoder.data import corpus, shards
    cache = cache or HashCache()
    if spec == "stdlib" or shards.is_prepared(spec):
        text = json.dumps(corpus.fingerprint(spec), sort_keys=True, default=str)
    else:
        text = "\n".join(f"{os.path.abspath(p)}\0{cache.sha256(p)}"
                         for p in corpus.expand_paths(spec))
    return {"path": spec, "sha256": hashlib.sha256(text.encode()).hexdigest()[:SHORT]}


def describe(identity: dict | None) -> str:
    """'W step 60 (pretraining workdir, sha256 1a2b...)', one line for a table."""
    if not identity:
        return "unknown (not recorded)"
    kind = {"pretraining": "pretraining workdir", "finetuning": "fine-tuning workdir, best/",
            "params": "params folder", "hf": "HF folder"}.get(identity.get("kind"),
                                                               identity.get("kind"))
    step = f" step {identity['step']}" if identity.get("step") is not None else ""
    return f"{identity.get('init_from')}{step} ({kind}, sha256 {identity.get('sha256')})"


def short(identity: dict | None) -> str:
    """'step 60 sha256:1a2b3c4d5e6f7a8b' (or 'sha256:...'): a table cell."""
    if not identity:
        return "unknown"
    step = f"step {identity['step']} " if identity.get("step") is not None else ""
    return f"{step}sha256:{identity.get('sha256')}"


def same_source(a: dict | None, b: dict | None) -> bool:
    return bool(a and b) and all(a.get(k) == b.get(k) for k in COMPARED)


def changes(old: dict | None, new: dict | None) -> list[str]:
    """What differs between two run-input records {source: identity, data: {name: {path,
    sha256}}, ...}: one phrase each ([] when they are one model on the same data)."""
    old, new = old or {}, new or {}
    out = []
    a, b = old.get("source"), new.get("source")
    if (a or b) and not same_source(a, b):
        if not a:
            out.append("the checkpoint it started from was not recorded")
        elif a.get("kind") != b.get("kind"):
            out.append(f"source: a {a.get('kind')} source -> a {b.get('kind')} one")
        elif a.get("step") != b.get("step"):
            out.append(f"source: step {a.get('step')} -> {b.get('step')} (the model at "
                       f"{b.get('init_from')} changed since this run)")
        else:
            out.append(f"source: its content changed (sha256 {a.get('sha256')} -> "
                       f"{b.get('sha256')})")
    da, db = old.get("data") or {}, new.get("data") or {}
    for name in sorted(set(da) | set(db)):
        x, y = da.get(name), db.get(name)
        if (x or {}).get("sha256") != (y or {}).get("sha256"):
            what = y or x
            out.append(f"data {name}: {what.get('path')} changed (sha256 "
                       f"{(x or {}).get('sha256')} -> {(y or {}).get('sha256')})")
    for key in sorted((set(old) | set(new)) - {"source", "data"}):
        if old.get(key) != new.get(key):
            out.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    return out
