"""Training FLOPs of a step (MFU divides them by a chip's peak: encoder/aot/chips.py).

A step's forward FLOPs are its objective's (each row of encoder/objectives/objectives.py
counts its own model and heads from the formulas of encoder/model/flops.py); forward +
backward = 3x forward.
"""
from encoder.model.flops import encoder_flops_per_token, mlm_head_flops  # noqa: F401


def train_flops_per_step(config, batch_size: int, seq_len: int,
                         predictions_per_row: int) -> float:
    """Forward + backward FLOPs of one train step (3x the forward pass)."""
    from encoder.objectives import objectives
    objective = objectives.OBJECTIVES[config.objective]
    return 3.0 * objective.forward_flops(config, batch_size, seq_len, predictions_per_row)


def config_train_flops_per_step(config) -> float:
    """train_flops_per_step for an experiment config (its batch, length, prediction slots)."""
    from encoder.config import max_predictions
    return train_flops_per_step(config, config.train.batch_size, config.data.seq_len,
                                max_predictions(config.data.seq_len, config.masking.rate))
