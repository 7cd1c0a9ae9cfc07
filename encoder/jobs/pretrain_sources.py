"""Where a pretraining run's state comes from when it is not its own checkpoint: an init
source's parameters (init_from: a workdir, a params folder or hf:DIR; the source must
compute this config's model with this run's tokenizer), or another run's whole state
(init_state=full: parameters, optimizer state, step and data position).
"""
import os

from absl import logging

from encoder import config as config_lib
from encoder.checkpoints import sources, store
from encoder.train import trainer as trainer_lib
from encoder.train.loop import report


# What pretraining may start fresh or leave unused from a source, and why.
MAY_START_FRESH = {"pair": "the next-sentence / sentence-order head is new (the source has none)"}
MAY_GO_UNUSED = {"pooler": "BERT's pooler feeds only a sentence-pair head",
                 "pair": "the source's sentence-pair head (this run has no pair task)"}


def check_source(cfg, src: sources.Pretrained, tok) -> None:
    """The source computes the model this config builds, with this run's tokenizer."""
    sources.check_architecture(cfg.init_from, src.model_cfg, cfg.model, cfg.get("init_allow", ""))
    sources.check_tokenizer(cfg.init_from, src.tokenizer, tok, "this run's data")


def load_init_params(init_from: str, params, shardings, step: int = -1, src=None,
                     allowed: str = "") -> tuple[dict, list[str]]:
    """Copies an init source's parameters (a workdir, params folder or hf:DIR; a workdir's
    checkpoint at `step`, -1: its newest) into params; anything the source lacks or has
    beyond the model is refused unless a rule or `allowed` (init_fresh) explains it.
    Returns (params, the report's lines)."""
    if step >= 0:
        loaded = checkpoint_at(init_from, step, None)[0]["params"]
    else:
        loaded = (src or sources.load(init_from)).params
    rep = sources.LoadReport()
    out = sources.merge_params(params, loaded, shardings, report=rep,
                               fresh=tuple(sources.fresh_prefixes(allowed)))
    said = rep.check(init_from, MAY_START_FRESH, MAY_GO_UNUSED, allowed)
    return out, [rep.summary(init_from)] + said


def checkpoint_at(workdir: str, step: int, abstract):
    """(state, data_state, meta, step) of another run's checkpoint (-1: its newest)."""
    if not store.has_checkpoint(workdir):
        raise FileNotFoundError(f"init_from={workdir!r}: no checkpoint in its workdir")
    mngr = store.manager(workdir, create=False)
    try:
        if step >= 0 and step not in mngr.all_steps():
            raise FileNotFoundError(f"init_from={workdir!r} has no checkpoint at init_step="
                                    f"{step} (it has {sorted(mngr.all_steps())})")
        return store.restore(mngr, abstract, step=None if step < 0 else step, set_aside=False)
    finally:
        mngr.close()


def source_init(cfg, tokenizer, said: list):
    """init(params, shardings) that loads init_from's parameters (None without a source,
    or with init_state=full), after checking the source computes this model with this
    tokenizer; its load report goes into `said`."""
    if not cfg.init_from:
        return None
    src = sources.load(cfg.init_from)
    check_source(cfg, src, tokenizer)
    if cfg.get("init_state", "params") != "params":
        return None

    def init(params, shardings):
        out, lines = load_init_params(cfg.init_from, params, shardings,
                                      cfg.get("init_step", -1), src, cfg.get("init_fresh", ""))
        said.extend(lines)
        return out
    return init


def full_start(cfg, trainer):
    """init_state=full: () -> Restored holding the source checkpoint's state and data
    position (None otherwise)."""
    if cfg.get("init_state", "params") != "full":
        return None

    def other():
        path, at = sources.split_step(cfg.init_from)  # WORKDIR@STEP is init_step=STEP
        state, data_state, _, step = checkpoint_at(
            path, cfg.get("init_step", -1) if at is None else at, trainer.abstract_state())
        report(f"starting from {cfg.init_from} at step {step} (parameters, optimizer state and "
               "data position)")
        return trainer_lib.Restored(state, data_state)
    return other


def filled(config):
    """experiments/continue.py leaves the model to its source: its fields filled from it."""
    if not any(v is None for v in config.model.values()):
        return config
    config = config.copy_and_resolve_references()
    for line in sources.fill_from_source(config, config_lib.model_config("tiny")):
        report(f"from {config.init_from}: {line}")
    return config


def check_init_from(config, workdir: str) -> None:
    """init_from names something that exists (a resume needs no source)."""
    path = sources.split_step(config.init_from)[0]  # WORKDIR@STEP: the workdir
    if not config.init_from or config.init_from.startswith("hf:") or os.path.isdir(path) \
            or store.has_checkpoint(workdir):
        return
    if os.path.exists(path):
        raise ValueError(f"init_from={config.init_from!r} is a file; it takes a workdir of "
                         "this codebase, a params folder, or hf:DIR (a HuggingFace folder)")
    raise FileNotFoundError(f"init_from={config.init_from!r}: {path} does not exist")


def check_tokenizer(config, workdir: str) -> None:
    """A given tokenizer is the source's, before any data is prepared with it."""
    if config.init_from and config.data.tokenizer and not store.has_checkpoint(workdir):
        from encoder.data import tokenizer as tokenizer_lib
        sources.check_tokenizer(config.init_from, sources.load_tokenizer(config.init_from),
                                tokenizer_lib.load(config.data.tokenizer),
                                f"data.tokenizer={config.data.tokenizer}")


def vocabulary(config, tokens: int) -> tuple[int, int]:
    """(rows, real tokens) of the model's vocabulary from its tokenizer: a source keeps its own rows (its
    extra rows are its own), a new model takes the tokenizer's tokens padded to a multiple
    of data.vocab_multiple, the padding masked out of the MLM softmax."""
    m = config.model
    if config.init_from:  # the source's rows, padding and all
        src = sources.model_config(config.init_from)
        if tokens > src.vocab_size:
            raise ValueError(f"the tokenizer has {tokens} tokens, init_from's model "
                             f"{src.vocab_size} rows: it is not the source's tokenizer")
        return src.vocab_size, src.get("real_vocab_size", 0)
    from encoder.data import tokenizer as tokenizer_lib
    rows = tokenizer_lib.padded_vocab_size(tokens, int(config.data.get("vocab_multiple", 1)))
    if (m.vocab_size, m.get("real_vocab_size", 0)) != (rows, tokens if rows != tokens else 0):
        # The tokenizer defines the vocabulary (sentencepiece stops early on a small corpus).
        logging.info("model.vocab_size %d -> %d rows for the tokenizer's %d tokens",
                     m.vocab_size, rows, tokens)
    return rows, tokens if rows != tokens else 0
