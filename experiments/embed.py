"""Sentence embeddings: encode a text file (one text per line) into unit vectors.

    python -m encoder.main --config=experiments/embed.py:pooling=mean --config.init_from=hf:DIR \
        --config.data.input_file=texts.txt [--config.eval.query="how do I open a file"] --workdir=DIR
"""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.finetune_config()
    config.mode = "embed"
    config.pooling = config_lib.parse_arg(arg).get("pooling", "mean")
    return config
