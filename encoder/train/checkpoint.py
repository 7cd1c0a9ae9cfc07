"""Deprecated alias (kept for one release): the checkpoint layer is encoder/checkpoints/store.py."""
from encoder.checkpoints.store import (  # noqa: F401
    CheckpointError, abstract_like, has_checkpoint, load_params, manager, ocp, restore, save,
    save_params)
