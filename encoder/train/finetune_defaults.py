"""Deprecated alias (kept for one release): encoder/finetune/defaults.py."""
from encoder.finetune.defaults import AUTO, DEFAULTS, MIN_LR_BY_MODE, defaults_for, resolve  # noqa: F401
