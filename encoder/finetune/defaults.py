"""Fine-tuning hyperparameters that fit the model being fine-tuned.

Published recipes differ by model size: BERT-base and -large fine-tune at
2e-5 to 5e-5 for 2-4 epochs with dropout 0.1 (Devlin et al. 2019, §A.3;
RoBERTa and ELECTRA likewise), while a 1.5M-parameter model barely moves at
those rates. The fields below default to "auto" (learning_rate 0,
num_epochs 0, dropout -1) and are filled from the row of DEFAULTS for the
model's width; a value given on the command line always wins. The run logs
what it chose and why.
"""
from absl import logging

# max hidden size -> defaults. The first row is measured here (BUILD_NOTES.md:
# the README's tiny model on the stdlib topic task, dev 0.948 at 1e-3, 6 epochs,
# no dropout; 0.377 at BERT-base's 5e-5, 3 epochs, dropout 0.1). The base/large
# rows are BERT's published grid; the middle row interpolates and is unmeasured.
DEFAULTS: tuple[tuple[int, dict], ...] = (
    (256, dict(learning_rate=1e-3, num_epochs=6, dropout=0.0, warmup_fraction=0.1)),
    (512, dict(learning_rate=2e-4, num_epochs=4, dropout=0.1, warmup_fraction=0.1)),
    (768, dict(learning_rate=5e-5, num_epochs=3, dropout=0.1, warmup_fraction=0.1)),
    (1 << 30, dict(learning_rate=2e-5, num_epochs=3, dropout=0.1, warmup_fraction=0.1)),
)
# A frozen encoder (linear probe) or LoRA adapters train few parameters and
# need a larger step than full fine-tuning (Hu et al. 2021 use 4e-4 to 5e-4).
MIN_LR_BY_MODE = {"full": 0.0, "frozen": 1e-3, "lora": 5e-4}

AUTO = {"learning_rate": 0.0, "num_epochs": 0, "dropout": -1.0}


def defaults_for(hidden_size: int, mode: str = "full") -> dict:
    for width, row in DEFAULTS:
        if hidden_size <= width:
            out = dict(row)
            out["learning_rate"] = max(out["learning_rate"], MIN_LR_BY_MODE.get(mode, 0.0))
            return out
    raise AssertionError("unreachable: the last row has no width limit")


def resolve(config, hidden_size: int, num_layers: int) -> list[str]:
    """Fills the auto fields of config in place; returns a line per choice for the log."""
    chosen = defaults_for(hidden_size, config.finetune.mode)
    fields = {"learning_rate": config.train, "num_epochs": config.train,
              "dropout": config.finetune}
    lines = []
    for name, section in fields.items():
        if section[name] == AUTO[name]:
            section[name] = chosen[name]
            lines.append(f"{name}={chosen[name]:g} (default for a {num_layers}-layer, "
                         f"{hidden_size}-wide model, mode={config.finetune.mode})")
        else:
            lines.append(f"{name}={section[name]:g} (given)")
    steps = int(config.train.get("num_steps", 0) or 0)
    if steps > 0:  # a step count wins over epochs: say so rather than print an unused default
        lines = [f"num_steps={steps} (given; num_epochs unused)" if line.startswith(
            "num_epochs=") else line for line in lines]
    for line in lines:
        logging.info("fine-tuning: %s", line)
    print("fine-tuning hyperparameters: " + "; ".join(lines), flush=True)
    return lines
