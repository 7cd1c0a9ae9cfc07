"""A study's runs as data: experiment + overrides -> one resolved config, kept in the run's workdir.

A study never flattens a configuration into `--config.*` strings. It resolves
each run's whole configuration here (the experiment file's `get_config(arg)`,
then field overrides given as data), and writes it into the run's workdir as
WORKDIR/job_config.py, a self-contained experiment file:

    python -m encoder run --config=WORKDIR/job_config.py --workdir=WORKDIR

is the run, on any machine and under any launcher. The same file is what a
later start of the study compares with (a changed field makes the run stale).
"""
import importlib.util
import json
import os

import ml_collections

from encoder import config as config_lib

JOB_CONFIG = "job_config.py"
_OPEN, _CLOSE = "CONFIG = json.loads(r'''", "''')"
_TEMPLATE = '''"""This run's whole configuration, written by the study runner (encoder/studies/).

    python -m encoder run --config={path} --workdir={workdir}
"""
import json

import ml_collections

{open}
{body}
{close}


def get_config(arg=None):
    del arg
    return ml_collections.ConfigDict(CONFIG)
'''


def load_experiment(spec: str) -> ml_collections.ConfigDict:
    """'experiments/finetune.py:task=qa' -> that file's get_config('task=qa')."""
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"experiment file {path!r} does not exist")
    name = "experiment_" + os.path.splitext(os.path.basename(path))[0]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg or None)


def set_field(config, path: str, value) -> None:
    """config[a][b][c] = value for 'a.b.c', cast to the field's type; unknown paths raise."""
    *parents, leaf = path.split(".")
    target = config
    for part in parents:
        if part not in target:
            raise ValueError(f"field {path!r}: no {part!r} in the config")
        target = target[part]
    if leaf not in target:
        raise ValueError(f"field {path!r}: no {leaf!r} in the config")
    current = target[leaf]
    if isinstance(value, str) and current is not None and not isinstance(current, str):
        value = config_lib.coerce(value)
    if isinstance(current, bool) and not isinstance(value, bool):
        raise ValueError(f"field {path!r}: {value!r} is not a bool (true or false)")
    if current is not None and not isinstance(current, bool):
        cast = type(current)
        try:
            new = cast(value)
        except (TypeError, ValueError):
            raise ValueError(f"field {path!r}: {value!r} is not a {cast.__name__}") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and new != value:
            raise ValueError(f"field {path!r}: {value!r} is not a {cast.__name__} (it would "
                             f"silently become {new!r})")
        value = new
    target[leaf] = value


def override(config, overrides: dict):
    """A resolved copy of config with each dotted field set (the original is untouched)."""
    config = config.copy_and_resolve_references()
    for path, value in overrides.items():
        set_field(config, path, value)
    return config


def parse_sets(sets) -> dict:
    """['train.learning_rate=1e-3', ...] (the commands' --*_set flags) -> {path: value}."""
    out = {}
    for kv in sets:
        path, sep, value = kv.partition("=")
        if not sep or not path.strip():
            raise ValueError(f"expected field=value, got {kv!r}")
        out[path.strip()] = config_lib.coerce(value.strip())
    return out


def as_data(config) -> dict:
    """The config as plain JSON data (tuples become lists, as the job file reads them)."""
    if hasattr(config, "to_json"):
        return json.loads(config.to_json())
    return json.loads(json.dumps(config))


def write(workdir: str, config: dict) -> str:
    """WORKDIR/job_config.py holding `config` (plain data); returns its path."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, JOB_CONFIG)
    # ' as a JSON escape: the raw triple-quoted literal can never be closed early.
    body = json.dumps(config, indent=1, sort_keys=True).replace("'", "\\u0027")
    text = _TEMPLATE.format(path=path, workdir=workdir, open=_OPEN, body=body, close=_CLOSE)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path


def read(workdir: str) -> dict | None:
    """The config a run's job_config.py holds, or None where there is none (or it is torn)."""
    try:
        with open(os.path.join(workdir, JOB_CONFIG)) as f:
            text = f.read()
        body = text.split(_OPEN, 1)[1].rsplit(_CLOSE, 1)[0]
        return json.loads(body)
    except (OSError, IndexError, ValueError):
        return None


def changed_fields(old: dict, new: dict, prefix: str = "") -> list[str]:
    """'a.b: old -> new' for every dotted field whose value differs."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k, "<absent>"), new.get(k, "<absent>")
        path = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_fields(a, b, path + ".")
        elif a != b:
            out.append(f"{path}: {a!r} -> {b!r}")
    return out
