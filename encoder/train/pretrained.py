"""Deprecated alias (kept for one release): start sources are encoder/checkpoints/sources.py."""
from encoder.checkpoints.sources import Pretrained, load  # noqa: F401
