"""orbax checkpoints: the train state and the data iterator's state, together.

A run's checkpoints live in WORKDIR/checkpoints/<step>/{state,data,meta}.
Resume order (nanodo, big_vision): the workdir's own latest checkpoint, else an
explicit init checkpoint (params only), else scratch.
"""
import json
import os

import jax
import orbax.checkpoint as ocp


def manager(workdir: str, keep: int = 3) -> ocp.CheckpointManager:
    return ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
        item_names=("state", "data", "meta"))


def save(mngr: ocp.CheckpointManager, step: int, state, data_state: dict, meta: dict) -> None:
    mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state),
        meta=ocp.args.JsonSave(meta)), force=True)


def restore(mngr: ocp.CheckpointManager, abstract_state, step: int | None = None):
    """Restores (state, data_state, meta) at step (default: the latest)."""
    step = mngr.latest_step() if step is None else step
    out = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore(),
        meta=ocp.args.JsonRestore()))
    return out["state"], out["data"], out["meta"]


def abstract_like(tree, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        tree, shardings)


def save_params(directory: str, params, model_cfg) -> None:
    """A params-only checkpoint plus model_config.json (e.g. an imported HF model)."""
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(os.path.join(directory, "params"), params, force=True)
    with open(os.path.join(directory, "model_config.json"), "w") as f:
        f.write(model_cfg.to_json(indent=2))


def load_params(directory: str):
    """Inverse of save_params: (model config, params) as numpy-backed arrays."""
    import ml_collections
    directory = os.path.abspath(directory)
    with open(os.path.join(directory, "model_config.json")) as f:
        cfg = ml_collections.ConfigDict(json.load(f))
    with ocp.StandardCheckpointer() as ckptr:
        params = ckptr.restore(os.path.join(directory, "params"))
    return cfg, params
