"""Intrinsic evaluation of a pretrained model: held-out MLM loss/accuracy and pseudo-perplexity.

    python -m encoder.main --config=experiments/evaluate.py --config.init_from=WORKDIR \
        [--config.data.valid_files=held_out.txt] --workdir=DIR
"""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.finetune_config()
    config.mode = "evaluate"
    if config_lib.parse_arg(arg).get("runlocal"):
        config.eval.max_tokens = 2000
    return config
