"""Intrinsic evaluation of a pretrained model: held-out MLM loss/accuracy and pseudo-perplexity.

    python -m encoder.main --config=experiments/evaluate.py --config.init_from=WORKDIR \
        [--config.data.valid_files=held_out.txt] --workdir=DIR

Options: runlocal (a 2,000-token budget), seed.
"""
from encoder.finetune import config as finetune_config


def get_config(arg=None):
    config = finetune_config.get_config(arg, job="evaluate")
    if config.train.num_epochs:  # runlocal was given
        config.eval.max_tokens = 2000
    return config
