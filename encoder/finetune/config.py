"""The schema of the fine-tuning, evaluate and embed jobs, as plain data.

Experiment files (experiments/finetune.py, evaluate.py, embed.py) start from
`finetune_config()` and apply their argument with the same syntax as every
experiment (`encoder.config.parse_arg` / `apply_options`). Names (task,
fine-tuning mode, pooling) are checked where their tables live, when the job
starts and before anything compiles.
"""
import ml_collections

from encoder import config as config_lib


def finetune_config() -> ml_collections.ConfigDict:
    """Defaults for fine-tuning, evaluation and embedding runs (config.mode of `encoder run`)."""
    config = ml_collections.ConfigDict()
    config.mode = "finetune"           # finetune | evaluate | embed
    config.task = "classification"     # encoder.tasks.table.TASKS
    config.seed = 0
    config.init_from = ""              # any workdir of this codebase, a params folder, or hf:DIR
    config.pooling = "cls"
    config.model = config_lib.model_config("tiny")  # only used without init_from
    config.data = ml_collections.ConfigDict(dict(
        train_file="", dev_file="", test_file="",  # fine-tuning task files
        input_file="",                 # embed: one text per line
        max_seq_len=128, doc_stride=64, max_answer_tokens=30,
        tokenizer="",                  # fine-tuning from scratch (no init_from)
        valid_files="", seq_len=128,  # evaluate: held-out text (default: the run's split)
        max_held_out_overlap=0.01))  # dev/test rows that are training rows: past it, refused
    # learning_rate 0, num_epochs 0, finetune.dropout -1: chosen by the model's size
    # (encoder/finetune/defaults.py); any value given here wins.
    config.train = ml_collections.ConfigDict(dict(
        num_epochs=0, batch_size=32, learning_rate=0.0, warmup_steps=0, num_steps=0,
        schedule="linear", end_learning_rate_fraction=0.0, b1=0.9, b2=0.999, eps=1e-6,
        weight_decay=0.01, clip_norm=1.0, checkpoint_every=0,  # 0: at every epoch's end
        keep_checkpoints=2, progress=False))
    config.finetune = ml_collections.ConfigDict(dict(
        mode="full",                   # full | frozen (linear probe) | lora
        lora_rank=8, lora_alpha=16.0, layer_decay=1.0, warmup_fraction=0.1, dropout=-1.0,
        random_init=False))  # True: init_from's architecture and tokenizer, random weights
    # The contrastive task's options (encoder/tasks/contrastive.py Options).
    config.contrastive = ml_collections.ConfigDict(dict(
        temperature=0.05, learn_temperature=False, symmetric=False, query_prefix="",
        passage_prefix="", matryoshka_dims="",   # "384,128": the loss at each prefix
        cache_chunk=0,                           # > 0: GradCache chunks of that many rows
        num_negatives=0, head="dense", colbert_dim=0, mask_duplicates=True,
        # in_batch | margin_mse | kl: the last two read a teacher score per passage
        # (encoder/retrieval/distill.py), plus in_batch_weight x the in-batch loss
        loss="in_batch", in_batch_weight=0.0, distill_temperature=1.0,
        distill_normalize="none",
        # head=sparse (SPLADE, encoder/retrieval/sparse.py): query side expand | terms,
        # flops | l1 with a weight per side ramped over flops_warmup_steps, index top terms
        sparse_query="expand", sparse_regularizer="flops", flops_query_weight=3e-4,
        flops_doc_weight=1e-4, flops_warmup_steps=0, sparse_top_terms=0))
    config.eval = ml_collections.ConfigDict(dict(
        max_tokens=20_000, batch_size=64, masking_seed=0, query="", top_k=5))
    config.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1))
    config.distributed = ml_collections.ConfigDict(dict(
        coordinator_address="", num_processes=0, process_id=-1))
    return config


def _runlocal(c, on):
    if on:
        c.train.update(dict(num_epochs=2, batch_size=16))
        c.data.max_seq_len = 64


# Options a fine-tuning experiment argument may set (task=qa,mode=lora,...).
OPTIONS = {
    "task": lambda c, v: setattr(c, "task", v),
    "mode": lambda c, v: setattr(c.finetune, "mode", v),
    "pooling": lambda c, v: setattr(c, "pooling", v),
    "seed": lambda c, v: setattr(c, "seed", int(v)),
    "runlocal": _runlocal,
}


def get_config(arg: str | None, job: str = "finetune") -> ml_collections.ConfigDict:
    """finetune_config for a job with the experiment argument applied."""
    config = finetune_config()
    config.mode = job
    options = config_lib.parse_arg(arg)
    config_lib.apply_options(config, options, OPTIONS)
    if config.task == "contrastive" and "pooling" not in options:
        config.pooling = "mean"        # Sentence-BERT's choice for embeddings
    return config
