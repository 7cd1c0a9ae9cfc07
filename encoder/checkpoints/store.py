"""orbax checkpoints: the train state, the data iterator's state and a meta dict, together.

A run's checkpoints live in WORKDIR/checkpoints/<step>/{state,data,meta}.
`restore` falls back from a latest step that does not restore (truncated,
half-deleted, written by a crashed process) to the newest one that does,
reporting each skipped step in one line and deleting nothing.
Params-only folders (`save_params`/`load_params`): DIR/params + DIR/model_config.json,
what fine-tuning keeps as best/ and what an HF import writes.
"""
import contextlib
import json
import os
import time

import jax
import orbax.checkpoint as ocp
from absl import logging

from encoder import errors


class CheckpointError(errors.UserFacing, RuntimeError):
    """No checkpoint of a run could be restored (each failure is named)."""


def state_bytes(tree) -> int:
    """What one checkpoint of `tree` writes, about: its arrays' bytes (abstract or not;
    orbax adds little)."""
    import numpy as np
    return int(sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
                   for x in jax.tree.leaves(tree) if hasattr(x, "shape")))


ROOM_MARGIN = 1.1  # a checkpoint's arrays plus orbax's metadata and the data state


def check_room(workdir: str, nbytes: int, what: str, note: str = "") -> None:
    """Refuses a write of about nbytes under workdir that the disk cannot hold, before it
    starts (a save that runs out of space mid-way fails in orbax's background threads, each
    with its traceback)."""
    import shutil
    free = shutil.disk_usage(workdir).free
    if free < ROOM_MARGIN * nbytes:
        raise errors.disk_full(workdir, f"{what} (about {nbytes / 2**20:.1f} MiB"
                               + (f"; {note}" if note else "") + ")")


@contextlib.contextmanager
def disk_full_named(workdir: str, mngr=None):
    """A full disk while a run writes (checkpoints, metrics, logs) becomes one DiskFull
    line naming the folder, what is free, and the last complete checkpoint."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - only a full disk is translated
        if not errors.is_disk_full(e) or isinstance(e, errors.DiskFull):
            raise
        last = None
        if mngr is not None:
            try:
                last = mngr.latest_step()
            except Exception:  # noqa: BLE001 - the figure is a courtesy
                pass
        what = (f"a checkpoint (the last complete one is step {last})" if last is not None
                else "the run's files (no complete checkpoint yet)")
        raise errors.disk_full(workdir, what) from None


def manager(workdir: str, keep: int = 3, create: bool = True) -> ocp.CheckpointManager:
    return ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=create),
        item_names=("state", "data", "meta"))


def checkpoints_to_write(workdir: str, keep: int | None) -> int:
    """How many more checkpoints the disk must hold for a run keeping `keep` of them: those
    it does not hold yet (at least the next one; keep None or 0: all, counted as one)."""
    folder = os.path.join(workdir, "checkpoints")
    held = sum(d.isdigit() for d in os.listdir(folder)) if os.path.isdir(folder) else 0
    return max(1, (keep or 1) - held)


def has_checkpoint(workdir: str) -> bool:
    folder = os.path.join(workdir, "checkpoints")
    return os.path.isdir(folder) and any(d.isdigit() for d in os.listdir(folder))


def save(mngr: ocp.CheckpointManager, step: int, state, data_state: dict, meta: dict) -> None:
    mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
        meta=ocp.args.JsonSave(meta)), force=True)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"


def restore(mngr: ocp.CheckpointManager, abstract_state=None, step: int | None = None,
            set_aside: bool = True):
    """(state, data_state, meta, step) from `step`, else the newest step that restores.

    abstract_state None restores the saved tree as it is (numpy-backed), as
    an init source does. Raises CheckpointError naming every step tried.
    set_aside: move the steps that failed out of the way (a run's own workdir
    only; never another run's, which may still be training).
    """
    steps = [step] if step is not None else sorted(mngr.all_steps(), reverse=True)
    if not steps:
        raise CheckpointError(f"{mngr.directory}: no checkpoint")
    state_args = (ocp.args.StandardRestore(abstract_state) if abstract_state is not None
                  else ocp.args.StandardRestore())
    failures, failed_steps = [], []
    for s in steps:
        try:
            out = mngr.restore(s, args=ocp.args.Composite(
                state=state_args, data=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore()))
        except Exception as err:  # noqa: BLE001 - any failure: try the previous step
            failures.append(f"step {s}: {_one_line(err)}")
            failed_steps.append(s)
            logging.warning("checkpoint step %d in %s does not restore (%s); trying the "
                            "previous one", s, mngr.directory, _one_line(err))
            print(f"warning: checkpoint step {s} in {mngr.directory} does not restore "
                  f"({_one_line(err)}); trying the previous one", flush=True)
            continue
        if failed_steps and set_aside:
            _set_aside(mngr, failed_steps)
        return out["state"], out["data"], out["meta"], s
    raise CheckpointError(f"{mngr.directory}: no checkpoint restores (" + "; ".join(failures)
                          + "). If the configuration changed, the checkpoints belong to "
                          "another model.")


def _set_aside(mngr: ocp.CheckpointManager, steps: list[int]) -> None:
    """Moves unrestorable steps to <workdir>/checkpoints.bad/ (kept, not deleted), so the
    redone steps can be saved again under their numbers."""
    root = str(mngr.directory)
    if jax.process_index() == 0:
        bad = root.rstrip("/") + ".bad"
        os.makedirs(bad, exist_ok=True)
        for step in steps:
            src = os.path.join(root, str(step))
            if os.path.exists(src):
                dst = os.path.join(bad, f"{step}-{int(time.time())}")
                os.replace(src, dst)
                print(f"moved the unrestorable checkpoint {src} to {dst}", flush=True)
    mngr.reload()


def abstract_like(tree, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        tree, shardings)


def save_params(directory: str, params, model_cfg, extra: dict | None = None,
                primary: bool = True) -> None:
    """A params-only checkpoint plus model_config.json (and extra JSON files by name).

    params may be sharded global arrays; in a multi-process job every process
    calls this (the orbax save is collective) and only `primary` writes the JSON.
    """
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(os.path.join(directory, "params"), params, force=True)
    if not primary:
        return
    for name, value in (extra or {}).items():
        with open(os.path.join(directory, name), "w") as f:
            json.dump(value, f, indent=1)
    # Written last: a folder with model_config.json is complete.
    with open(os.path.join(directory, "model_config.json"), "w") as f:
        f.write(model_cfg.to_json(indent=2))


def is_params_folder(directory: str) -> bool:
    return (os.path.exists(os.path.join(directory, "model_config.json"))
            and os.path.isdir(os.path.join(directory, "params")))


def load_params(directory: str):
    """Inverse of save_params: (model config, params) as numpy-backed arrays."""
    import ml_collections
    directory = os.path.abspath(directory)
    with open(os.path.join(directory, "model_config.json")) as f:
        cfg = ml_collections.ConfigDict(json.load(f))
    with ocp.StandardCheckpointer() as ckptr:
        params = ckptr.restore(os.path.join(directory, "params"))
    return cfg, params
