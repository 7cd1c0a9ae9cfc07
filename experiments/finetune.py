"""Fine-tuning a pretrained (or imported) encoder on a task file.

    python -m encoder run --config=experiments/finetune.py:task=qa,mode=lora \
        --config.init_from=hf:PATH --config.data.train_file=train.jsonl \
        --config.data.dev_file=dev.jsonl --workdir=DIR

Options (encoder.finetune.config.OPTIONS): task (classification | regression |
tagging | qa | contrastive), mode (full | frozen | lora), pooling, seed, runlocal.
"""
from encoder.finetune import config as finetune_config


def get_config(arg=None):
    return finetune_config.get_config(arg, job="finetune")
