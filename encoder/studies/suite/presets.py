"""The suite's conventions, written down as data: one row per published recipe.

A preset fixes what a results table depends on besides the model: the seeds,
the learning-rate grid, epochs per task, batch, warmup, weight decay, layer-wise
decay, dropout, sequence lengths, the pooling rule, which tasks start from the
MNLI model, and how the average is taken. Every field may be a plain value or
a width table `((max_hidden_size, value), ...)` read at the source model's
width (ELECTRA's learning rate depends on the model size). Command-line flags
override single fields (encoder/commands/suite.py).

Sources (BUILD_NOTES.md, "Downstream suite: conventions", says which values
could be checked offline):
  electra     Clark et al. 2020, Appendix A (Table 7) and google-research/electra's
              configure_finetuning.py (read from a stored copy of the repository).
  roberta     Liu et al. 2019, §5.1 and Appendix C (Table 10), from memory.
  modernbert  Warner et al. 2024, appendix on GLUE fine-tuning, from memory;
              unchecked offline (no copy of the paper or of its glue configs here).
  bert        Devlin et al. 2019, §4.1 and Appendix A.3, from memory.
  default     this codebase's small-model finding (encoder/finetune/defaults.py) as
              the grid's centre.
  runlocal    the smallest run that exercises every path (tests, smoke runs).

Selection rule, for every preset: for each task and learning rate, the median
dev score over seeds; the learning rate with the best median is chosen; the
task reports that median and the spread over its seeds (ELECTRA reports the
median of 10 runs; RoBERTa the median of 5).
"""
from encoder import registry
from encoder.tasks.table import TASKS

INF = 1 << 30

# Epochs a published recipe gives a task type whatever its other tasks get (SQuAD: 2 in
# BERT, ELECTRA, RoBERTa and ModernBERT's setups): each type's `recipe_epochs`.
RECIPE_EPOCHS = {name: cls.recipe_epochs for name, cls in TASKS.items() if cls.recipe_epochs}

# name -> fields. Learning rates are tuples (a grid); epochs 0 and dropout -1 mean
# "by the model's width" (encoder/finetune/defaults.py). task_epochs is keyed by task
# name or task type; qa_max_seq_len is the length of a type whose `seq_len_field` names
# it (qa's long contexts).
PRESETS = {
    "default": dict(
        seeds=3,
        learning_rates=((256, (3e-4, 1e-3, 3e-3)), (512, (1e-4, 2e-4, 5e-4)),
                        (768, (2e-5, 5e-5, 1e-4)), (INF, (1e-5, 2e-5, 3e-5))),
        epochs=0, task_epochs={}, batch_size=32, warmup_fraction=0.1, weight_decay=0.01,
        layer_decay=1.0, dropout=-1.0, max_seq_len=128, qa_max_seq_len=192,
        pooling="mean", intermediate={}, average="glue", max_train=0, max_eval=0),
    "runlocal": dict(
        seeds=1,
        learning_rates=((256, (1e-3,)), (512, (2e-4,)), (768, (5e-5,)), (INF, (2e-5,))),
        epochs=1, task_epochs={}, batch_size=16, warmup_fraction=0.1, weight_decay=0.01,
        layer_decay=1.0, dropout=0.0, max_seq_len=64, qa_max_seq_len=128,
        pooling="mean", intermediate={}, average="glue", max_train=64, max_eval=48),
    # ELECTRA: lr 3e-4 small / 1e-4 base / 5e-5 large (Table 7; the released code keeps
    # 1e-4 for small), layer-wise decay 0.8 (0.9 large), 3 epochs, 10 for RTE and STS-B,
    # 2 for SQuAD, batch 32, warmup 10%, weight decay 0 (Table 7; the code's default is
    # 0.01), dropout 0.1, 128 tokens (512 for SQuAD), median of 10 runs. The dev-set
    # average reports CoLA MCC, STS-B Spearman, accuracy elsewhere, WNLI left out.
    "electra": dict(
        seeds=10,
        learning_rates=((256, (3e-4,)), (768, (1e-4,)), (INF, (5e-5,))),
        epochs=3, task_epochs={"RTE": 10, "STS-B": 10, **RECIPE_EPOCHS}, batch_size=32,
        warmup_fraction=0.1, weight_decay=0.0, layer_decay=((768, 0.8), (INF, 0.9)),
        dropout=0.1, max_seq_len=128, qa_max_seq_len=512, pooling="cls_gelu",
        intermediate={}, average="electra", max_train=0, max_eval=0),
    # RoBERTa: lr {1e-5, 2e-5, 3e-5}, batch {16, 32} (32 here: the suite does not sweep
    # batch), 10 epochs with the best dev epoch kept, warmup 6%, weight decay 0.1,
    # median of 5 seeds; RTE, STS-B and MRPC start from the MNLI model (their
    # leaderboard submissions).
    "roberta": dict(
        seeds=5, learning_rates=((INF, (1e-5, 2e-5, 3e-5)),),
        epochs=10, task_epochs=dict(RECIPE_EPOCHS), batch_size=32, warmup_fraction=0.06,
        weight_decay=0.1, layer_decay=1.0, dropout=0.1, max_seq_len=128, qa_max_seq_len=384,
        pooling="cls_tanh", intermediate={"RTE": "MNLI", "MRPC": "MNLI", "STS-B": "MNLI"},
        average="glue", max_train=0, max_eval=0),
    # ModernBERT (unchecked offline): lr {1e-5, 3e-5, 5e-5, 8e-5}; epochs swept over
    # {1, 2, 3} for MNLI, QNLI, QQP, SST-2 and {2, 5, 10} for the small tasks (here the
    # largest, with the best dev epoch kept, which stands in for the epoch sweep); a
    # small weight-decay sweep (one value here); RTE, MRPC and STS-B from the MNLI
    # checkpoint.
    "modernbert": dict(
        seeds=1, learning_rates=((INF, (1e-5, 3e-5, 5e-5, 8e-5)),),
        epochs=10, task_epochs={"MNLI": 3, "QNLI": 3, "QQP": 3, "SST-2": 3, **RECIPE_EPOCHS},
        batch_size=32, warmup_fraction=0.1, weight_decay=1e-5, layer_decay=1.0,
        dropout=0.1, max_seq_len=128, qa_max_seq_len=384, pooling="cls",
        intermediate={"RTE": "MNLI", "MRPC": "MNLI", "STS-B": "MNLI"}, average="glue",
        max_train=0, max_eval=0),
    # BERT: lr {5e-5, 4e-5, 3e-5, 2e-5}, batch 32, 3 epochs, best on dev (one run per
    # setting; restarts for BERT-large), BERT's pooler (tanh on [CLS]).
    "bert": dict(
        seeds=1, learning_rates=((INF, (5e-5, 4e-5, 3e-5, 2e-5)),),
        epochs=3, task_epochs=dict(RECIPE_EPOCHS), batch_size=32, warmup_fraction=0.1,
        weight_decay=0.01, layer_decay=1.0, dropout=0.1, max_seq_len=128, qa_max_seq_len=384,
        pooling="cls_tanh", intermediate={}, average="glue", max_train=0, max_eval=0),
}

# How the one number is taken. glue: each task's metrics averaged, then the tasks
# (Wang et al. 2019 §4; MNLI's matched and mismatched accuracies are its two metrics).
# electra: one metric per GLUE task (CoLA MCC, STS-B Spearman, accuracy elsewhere,
# MNLI matched) and WNLI left out (Clark et al. 2020, Table 1 footnotes).
AVERAGES = {
    "glue": dict(metrics={}, exclude=()),
    "electra": dict(metrics={"CoLA": ("mcc",), "STS-B": ("spearman",), "MRPC": ("accuracy",),
                             "QQP": ("accuracy",), "MNLI": ("accuracy_m",)},
                    exclude=("WNLI",)),
}


def at_width(value, hidden_size: int):
    """A preset field at the model's width: width tables pick their first fitting row."""
    if isinstance(value, tuple) and value and all(
            isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], int) for r in value):
        for width, v in value:
            if hidden_size <= width:
                return v
        raise ValueError(f"no row of {value} fits hidden size {hidden_size}")
    return value


def resolve(name: str, hidden_size: int, overrides: dict | None = None) -> dict:
    """The preset's fields at this width, with command-line overrides (None: keep)."""
    row = registry.lookup(PRESETS, name, "suite preset")
    out = {k: at_width(v, hidden_size) for k, v in row.items()}
    out["learning_rates"] = tuple(out["learning_rates"])
    for k, v in (overrides or {}).items():
        if v is not None:
            if k not in out:
                raise ValueError(f"unknown preset field {k!r}; fields: {sorted(out)}")
            out[k] = v
    registry.lookup(AVERAGES, out["average"], "average rule")
    if not out["learning_rates"] or out["seeds"] < 1:
        raise ValueError(f"a suite needs at least one learning rate and one seed, got "
                         f"{out['learning_rates']} and {out['seeds']}")
    bad = [lr for lr in out["learning_rates"] if not 0 < lr < float("inf")]
    if bad:  # refused here, not by every fine-tuning run after the data is prepared
        raise ValueError(f"--learning_rates must be positive numbers, got {bad} in "
                         f"{list(out['learning_rates'])}")
    return out


def epochs_for(preset: dict, task: str, task_type: str) -> int:
    """Epochs for a task: by its name, else by its type, else the preset's."""
    per = preset["task_epochs"]
    return int(per.get(task, per.get(task_type, preset["epochs"])))


def seq_len_for(preset: dict, task_type: str, task_value: int = 0) -> int:
    """Tokens per input: the task's own (task.json) or the preset's for its type (the
    field its `seq_len_field` names; max_seq_len for embedding tasks)."""
    if task_value:
        return int(task_value)
    field = TASKS[task_type].seq_len_field if task_type in TASKS else "max_seq_len"
    return int(preset[field])


# GLUE's intermediate-task convention (RoBERTa §5.1, ModernBERT): these start from the
# fine-tuned MNLI model. Used by --intermediate=on when the preset names none.
GLUE_INTERMEDIATE = {"RTE": "MNLI", "MRPC": "MNLI", "STS-B": "MNLI"}
