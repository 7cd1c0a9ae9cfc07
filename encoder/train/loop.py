"""Deprecated alias (kept for one release): pretraining is encoder/train/pretrain.py and the
shared step and loop are encoder/train/trainer.py."""
from encoder.train.pretrain import (  # noqa: F401
    Run, build, evaluate, load_init_params, most_frequent_token, train, validate)
from encoder.train.trainer import TrainState, make_step, report  # noqa: F401

setup = build
