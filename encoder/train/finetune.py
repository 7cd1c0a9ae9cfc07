"""Deprecated alias (kept for one release): fine-tuning is the encoder/finetune/ package."""
from encoder.finetune.frozen import MODES  # noqa: F401
from encoder.finetune.run import build, finetune, padded_batches  # noqa: F401
from encoder.finetune.tasks import TASKS  # noqa: F401
