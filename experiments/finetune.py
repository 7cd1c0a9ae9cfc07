"""Fine-tuning a pretrained (or imported) encoder on a task file.

    python -m encoder.main --config=experiments/finetune.py:task=qa,mode=lora \
        --config.init_from=hf:PATH --config.data.train_file=train.jsonl \
        --config.data.dev_file=dev.jsonl --workdir=DIR

Options: task (classification | regression | tagging | qa | contrastive),
mode (full | frozen | lora), pooling, seed, runlocal.
"""
from encoder import config as config_lib


def get_config(arg=None):
    config = config_lib.finetune_config()
    options = config_lib.parse_arg(arg)
    for key, value in options.items():
        if key == "task":
            config.task = value
        elif key == "mode":
            config.finetune.mode = value
        elif key == "pooling":
            config.pooling = value
        elif key == "seed":
            config.seed = int(value)
        elif key == "runlocal":
            config.train.update(dict(num_epochs=2, batch_size=16))
            config.data.max_seq_len = 64
        else:
            raise ValueError(f"Unknown experiment option {key!r}; valid names: mode, pooling, "
                             "runlocal, seed, task")
    if config.task == "contrastive":
        config.pooling = options.get("pooling", "mean")
    return config
