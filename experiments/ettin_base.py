"""Ettin-style encoder at ModernBERT-base's size (Weller et al. 2025, the Ettin suite of
paired encoders and decoders, jhu-clsp): ModernBERT's recipe in three phases, each a
separate config with its own released checkpoints: 1.7T tokens at 1,024, a 250B-token
context extension to 8,192 (global RoPE base 1.6e5), a 50B-token decay.

The budgets are the ones published for the suite; the optimizer, learning rates, batch
sizes and masking are modernbert_base's (assumed). A phase's checkpoint is a run's
checkpoint at the phase's last step (metrics.jsonl and the checkpoint meta name it):
`python -m encoder merge --workdirs=DIR@STEP` writes it as a params folder.

Data: modernbert_base's mixture and its per-phase changes (web, code and scientific text
drawn in proportion to their tokens; the decay adds the higher-quality `quality` role).
Ettin's own data is released per phase in MDS (pretraining, extension, decay): give its
folders as the roles' files (--config.data.sources.ROLE.files=..., .format=mds); the
extension's own higher-quality mix is not a separate role here.
"""
from encoder import config as config_lib
from experiments import modernbert_base

PHASES = tuple(dict(p, tokens=t) for p, t in zip(
    modernbert_base.PHASES, (1_700_000_000_000, 250_000_000_000, 50_000_000_000)))


def get_config(arg=None):
    config = modernbert_base.get_config()
    config.phases = PHASES
    return config_lib.finalize(config, arg)
