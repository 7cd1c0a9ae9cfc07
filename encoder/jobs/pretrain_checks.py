"""Every check a pretraining config gets before data or a tokenizer is touched, and the
lines a run says about the data it opened (unknown tokens, passes over the corpus).

`validate` returns the run's phase plan (encoder/train/phases.py), computed once per
run; `check_fits` sizes each phase's step against the devices' memory.
"""
import os

from encoder import ranges
from encoder.aot import memory
from encoder.checkpoints import sources
from encoder.jobs import evals
from encoder.objectives import objectives
from encoder.train import optimizer, phases as phases_lib, trainer as trainer_lib

INIT_STATES = ("params", "full")
MIN_SEQ_LEN = 8  # [CLS] + [SEP] + a few text tokens, so that each row has tokens to mask


def validate(config, num_devices: int | None = None) -> phases_lib.Plan:
    """Every check a pretraining config can get before data or a tokenizer is touched;
    returns the run's phase plan (computed here, once per run)."""
    ranges.check(config)  # every number in its range, first (encoder/ranges.py)
    objectives.validate(config)
    optimizer.validate(config.train)
    trainer_lib.check_train_config(config.train, num_devices)
    for name in ("num_steps", "log_every", "checkpoint_every"):
        if config.train[name] <= 0:
            raise ValueError(f"train.{name} must be positive, got {config.train[name]}")
    evals.parse(config.get("evals"), config.train.checkpoint_every, config.model.num_layers)
    sources.check_init_fields(config)
    if config.train.eval_every and config.train.eval_batches <= 0:
        raise ValueError(f"train.eval_batches must be positive when eval_every > 0, got "
                         f"{config.train.eval_batches}")
    if config.get("init_state", "params") not in INIT_STATES:
        raise ValueError(f"Unknown init_state {config.init_state!r}; valid names: "
                         f"{', '.join(INIT_STATES)}")
    if config.get("init_state", "params") == "full" and (
            not config.init_from or config.init_from.startswith("hf:")):
        raise ValueError("init_state=full continues another run of this codebase: init_from "
                         f"must be its workdir, got {config.init_from!r}")
    plan = phases_lib.validate(config)
    if float(config.train.get("time_budget_s", 0.0)) > 0 and (
            len(plan.phases) > 1 or config.train.batch_warmup_tokens):
        raise ValueError("train.time_budget_s reads one schedule on a clock: it takes a run "
                         "of one phase without batch_warmup_tokens (phases and batch warmup "
                         "are budgeted in steps or tokens)")
    if config.get("phases"):
        for ph in plan.phases:
            objectives.validate(ph.config)
            trainer_lib.check_train_config(ph.config.train, num_devices)
    for ph in plan.phases:
        where = f"phase {ph.name!r}: " if config.get("phases") else ""
        if ph.config.data.seq_len < MIN_SEQ_LEN:
            raise ValueError(f"{where}data.seq_len={ph.config.data.seq_len}: a row holds [CLS], "
                             f"[SEP] and its text; give at least {MIN_SEQ_LEN} tokens")
    data = config.data
    if config.train.eval_every and data.valid_files and _same_files(data.valid_files,
                                                                 data.train_files):
        raise ValueError(f"data.valid_files={data.valid_files!r} are the training files: the "
                         "held-out figures would be training figures. Leave valid_files empty "
                         "(a share of documents is held out by content hash) or give other files")
    return plan


def _same_files(valid: str, train: str) -> bool:
    """Whether held-out files are training files: the same spec, or a held-out file among
    the files the training spec expands to (a file inside a training folder)."""
    def norm(spec):
        return sorted(os.path.realpath(p.strip()) for p in spec.split(",") if p.strip())
    if norm(valid) == norm(train):
        return True
    from encoder.data import corpus
    try:
        trained = {os.path.realpath(p) for p in corpus.expand_paths(train)}
        held = {os.path.realpath(p) for p in corpus.expand_paths(valid)}
    except (OSError, ValueError):  # a spec that does not expand is refused where it is read
        return False
    return bool(held & trained)


def check_fits(config, plan: phases_lib.Plan, devices=None) -> None:
    """Each phase's step against the devices' memory (encoder/aot/memory.py)."""
    for ph in plan.phases:
        c = ph.config
        memory.check_fits(c.model, c.train.batch_size, c.train.get("grad_accum_steps", 1),
                          c.data.seq_len, devices,
                          f"phase {ph.name!r}: " if config.get("phases") else "")


def unknown_tokens(counts, tok, always: bool = False) -> str | None:
    """The share of the training tokens the tokenizer spells as its unknown token: said when
    it is more than a trace (a source's vocabulary that cannot spell this corpus: its
    held-out figures would count [UNK] as a word), and always for a run from a source."""
    total = int(counts.sum())
    unk = int(counts[tok.unk_id]) if 0 <= tok.unk_id < len(counts) else 0
    share = unk / total if total else 0.0
    if not total or (share < 0.001 and not always):
        return None
    line = (f"data: {share:.1%} of the training tokens ({unk:,} of {total:,}) are the unknown "
            f"token {tok.id_to_piece(tok.unk_id)!r}")
    if share >= 0.05:
        line += (": the tokenizer cannot spell much of this corpus (a vocabulary of another "
                 "language or script?); masked-token figures count it as a word")
    return line


def data_passes(rows: int, steps: int, batch_size: int, seq_len: int) -> str:
    """How many times the run reads its training data (the main job reads the 435k-token
    stdlib corpus 11 times); past a few passes the train/held-out gap is worth watching."""
    epochs = steps * batch_size / max(rows, 1)
    line = (f"data: {rows:,} training rows of {seq_len} tokens; {steps:,} steps x {batch_size} "
            f"rows read it {epochs:.1f} times")
    if epochs > 4:
        line += " (many passes over a small corpus: watch the train/held-out gap)"
    return line
