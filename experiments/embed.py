"""Sentence embeddings: encode a text file (one text per line) into unit vectors.

    python -m encoder run --config=experiments/embed.py:pooling=mean --config.init_from=hf:DIR \
        --config.data.input_file=texts.txt [--config.eval.query="how do I open a file"] --workdir=DIR

Options: pooling (default mean), seed.
"""
from encoder.finetune import config as finetune_config


def get_config(arg=None):
    config = finetune_config.get_config(arg, job="embed")
    if "pooling" not in (arg or ""):
        config.pooling = "mean"
    return config
