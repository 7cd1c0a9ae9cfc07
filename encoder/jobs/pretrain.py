"""Pretraining: the objective's loss on packed rows, through the shared trainer.

    python -m encoder run --config=experiments/pretrain.py --workdir=DIR

`build(config, workdir)` makes the whole run once (data, tokenizer, objective
context, Trainer with its compiled step, evaluation function) without
touching the caller's config; `train(config, workdir)` resumes or starts it
and runs the shared loop (encoder/train/loop.py) once per phase.

A run in phases (config.phases; encoder/train/phases.py) keeps one train state
through all of them: each phase gets its own step (a new seq_len, masking rate or
RoPE base recompiles it), data stream and held-out rows; the learning rate is the
phases' schedules joined, built into the one optimizer. `init_state=full` starts
a run from another run's checkpoint (init_from, init_step) with its optimizer
state, step and data position: a decay from step N of a stable run, a context
extension from a short run. With train.ema_decay > 0 the held-out metrics are
also reported for the parameter EMA (eval_ema/...).
"""
import dataclasses
import os
import types
from typing import Any

import jax
from absl import logging

from encoder import config as config_lib
from encoder.checkpoints import sources, store
from encoder.data import pipeline
from encoder.eval import evaluators
from encoder.jobs import evals
from encoder.objectives import objectives, pretraining
from encoder.train import flops, memory, optimizer, partitioning, phases as phases_lib
from encoder.train import loop, trainer as trainer_lib
from encoder.train import workdir as workdir_lib
from encoder.train.loop import report


# Fields a restart may change (logged); any other change is refused (train/workdir.py).
MUTABLE = ("train.num_steps", "train.log_every", "train.eval_every", "train.eval_batches",
           "train.grad_accum_steps",  # the same global batch, cut into other micro-batches
           "train.checkpoint_every", "train.keep_checkpoints", "train.progress",
           "train.peak_flops", "train.debug_nan_at_step", "data.cache_dir", "mesh",
           "distributed", "model.attention_impl", "model.remat",
           "evals",   # what is scored along the way, not what is trained
           "phases")  # appended phases only (phases.check_appended)
INIT_STATES = ("params", "full")


def validate(config, num_devices: int | None = None) -> None:
    """Every check a pretraining config can get before data or a tokenizer is touched."""
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
    warmup, steps = int(config.train.get("warmup_steps", 0)), plan.total_steps
    if not config.get("phases") and warmup and warmup >= steps:
        raise ValueError(f"train.warmup_steps={warmup} is not shorter than the run "
                         f"(train.num_steps={steps}): the learning rate would never reach its "
                         "peak; lower warmup_steps")
    data = config.data
    if config.train.eval_every and data.valid_files and _same_files(data.valid_files,
                                                                 data.train_files):
        raise ValueError(f"data.valid_files={data.valid_files!r} are the training files: the "
                         "held-out figures would be training figures. Leave valid_files empty "
                         "(a share of documents is held out by content hash) or give other files")


MIN_SEQ_LEN = 8  # [CLS] + [SEP] + a few text tokens, so that each row has tokens to mask


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


def check_fits(config, devices=None) -> None:
    """Each phase's step against the devices' memory (encoder/train/memory.py)."""
    plan = phases_lib.validate(config)
    for ph in plan.phases:
        c = ph.config
        memory.check_fits(c.model, c.train.batch_size, c.train.get("grad_accum_steps", 1),
                          c.data.seq_len, devices,
                          f"phase {ph.name!r}: " if config.get("phases") else "")


@dataclasses.dataclass(frozen=True)
class Run:
    """Everything a pretraining run holds besides the loop's local variables."""
    config: Any               # the resolved copy (vocab_size = the tokenizer's)
    workdir: str
    mesh: Any
    tokenizer: Any
    ctx: Any                  # objectives.ObjectiveContext (the first phase's)
    trainer: trainer_lib.Trainer
    train_rows: Any           # random-access row sources (encoder.data.pipeline)
    valid_rows: Any
    eval_fn: Any
    flops_per_step: float
    plan: Any = None          # phases.Plan (one phase "main" when none is declared)
    most_frequent_id: int = 5


@dataclasses.dataclass(frozen=True)
class PhaseRun:
    """One phase's pieces: its config, step(s), data and evaluation (the state is the run's)."""
    phase: Any                # phases.Phase
    config: Any
    trainer: Any              # a view of the run's Trainer with this phase's step_fn
    train_rows: Any
    valid_rows: Any
    eval_fn: Any
    flops_per_step: float


def _barrier(name: str) -> None:
    """All processes wait here (after process 0 prepared data or trained a tokenizer)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def _open_data(cfg, workdir: str):
    return pipeline.open_pretraining_data(cfg.data, workdir, cfg.model.vocab_size,
                                          cfg.pair_task, cfg.seed,
                                          primary=jax.process_index() == 0, barrier=_barrier)


def set_vocabulary(config, tokens: int) -> None:
    """The model's vocabulary rows from its tokenizer: a source keeps its own rows (its
    extra rows are its own), a new model takes the tokenizer's tokens padded to a multiple
    of data.vocab_multiple, the padding masked out of the MLM softmax."""
    m = config.model
    if config.init_from:  # the source's rows, padding and all
        src = sources.model_config(config.init_from)
        m.vocab_size, m.real_vocab_size = src.vocab_size, src.get("real_vocab_size", 0)
        if tokens > m.vocab_size:
            raise ValueError(f"the tokenizer has {tokens} tokens, init_from's model "
                             f"{m.vocab_size} rows: it is not the source's tokenizer")
        return
    from encoder.data import tokenizer as tokenizer_lib
    rows = tokenizer_lib.padded_vocab_size(tokens, int(config.data.get("vocab_multiple", 1)))
    if (m.vocab_size, m.get("real_vocab_size", 0)) != (rows, tokens if rows != tokens else 0):
        # The tokenizer defines the vocabulary (sentencepiece stops early on a small corpus).
        logging.info("model.vocab_size %d -> %d rows for the tokenizer's %d tokens",
                     m.vocab_size, rows, tokens)
    m.vocab_size = rows
    m.real_vocab_size = tokens if rows != tokens else 0


def build(config, workdir: str, devices=None) -> Run:
    """The run, built once: data, tokenizer, objective, trainer and evaluation (for a run in
    phases: the first phase's, with the optimizer of all of them)."""
    config = config.copy_and_resolve_references()  # never mutate the caller's config
    mesh = partitioning.make_mesh(config.mesh, devices)
    validate(config, mesh.devices.size)
    first = phases_lib.plan(config).phases[0].config
    data = _open_data(first, workdir)
    logging.info("data: %s", data.description)
    if data.valid is None and config.train.eval_every:
        from encoder.data import shards
        prepared = shards.is_prepared(str(config.data.train_files))
        raise ValueError(
            f"no held-out document to evaluate on ({data.description}): "
            + ("a prepared corpus keeps the split prepare made: prepare it again with a "
               "larger --valid_fraction (and more than one document)" if prepared else
               f"raise data.valid_fraction (now {config.data.valid_fraction})")
            + ", give data.valid_files, or set train.eval_every=0")
    tok = data.tokenizer
    set_vocabulary(config, tok.vocab_size)
    plan = phases_lib.plan(config)
    first = plan.phases[0].config
    if config.get("phases"):
        config.train.num_steps = plan.total_steps  # derived: the phases' steps
    mft = pretraining.most_frequent_token(data.token_counts, tok.special_ids)
    step = pretraining.build(first, tok, mft)
    tx = optimizer.make_optimizer(config.train, plan.schedule, plan.peak_learning_rate)
    trainer = trainer_lib.Trainer(
        mesh, tx, step.init_params, loss_fn=step.loss_fn,
        prepare=step.prepare, seed=config.seed, grad_accum=first.train.grad_accum_steps,
        nan_at_step=config.train.debug_nan_at_step)
    return Run(config, workdir, mesh, tok, step.ctx, trainer, data.train, data.valid,
               trainer.jit_eval(step.eval_step), flops.config_train_flops_per_step(first),
               plan, mft)


class _PhaseTrainer:
    """What run_loop reads of a Trainer (step_fn, shard), with one phase's step. A phase
    with varying rows per step (batch-size warmup) gets one compiled step per row count,
    each accumulating rows / micro micro-batches (jit compiles each shape once)."""

    def __init__(self, trainer, step_pieces, phase, nan_at_step: int):
        self.mesh, self.tx, self.shardings = trainer.mesh, trainer.tx, trainer.shardings
        self.shard = trainer.shard
        self._pieces, self._phase, self._nan = step_pieces, phase, nan_at_step
        self._fns: dict[int, Any] = {}
        self.grad_accum = phase.config.train.grad_accum_steps

    def _fn(self, accum: int):
        if accum not in self._fns:
            self._fns[accum] = trainer_lib.jit_step(trainer_lib.make_step(
                self._pieces.loss_fn, self.tx, self._pieces.prepare, accum, self._nan),
                self.shardings, self.mesh)
        return self._fns[accum]

    def step_fn(self, state, batch, rng):
        rows = batch["input_ids"].shape[0]
        accum = (self.grad_accum if rows == self._phase.config.train.batch_size
                 else rows // self._phase.micro)
        return self._fn(accum)(state, batch, rng)


def build_phase(run: Run, phase) -> PhaseRun:
    """A phase's step, data and evaluation over the run's state and optimizer."""
    cfg = phase.config
    if phase.index == 0:
        data = types.SimpleNamespace(train=run.train_rows, valid=run.valid_rows)
        pieces = None
    else:
        data = _open_data(cfg, run.workdir)
        if data.tokenizer.fingerprint() != run.tokenizer.fingerprint():
            raise ValueError(f"phase {phase.name!r}: its data's tokenizer is not the run's "
                             f"({data.tokenizer.vocab_size} and {run.tokenizer.vocab_size} "
                             "tokens): prepare the phase's data with the run's tokenizer")
        if data.valid is None and cfg.train.eval_every:
            raise ValueError(f"phase {phase.name!r}: no held-out document to evaluate on")
    pieces = pretraining.build(cfg, run.tokenizer, run.most_frequent_id)
    if phase.index == 0 and not phase.warmup_rows and phase.fetch == cfg.train.batch_size:
        trainer, eval_fn = run.trainer, run.eval_fn
    else:
        trainer = _PhaseTrainer(run.trainer, pieces, phase, run.config.train.debug_nan_at_step)
        eval_fn = run.trainer.jit_eval(pieces.eval_step)
    return PhaseRun(phase, cfg, trainer, data.train, data.valid, eval_fn,
                    flops.config_train_flops_per_step(cfg))


def held_out(run, prefix: str = "eval/", num_batches: int = 0) -> evaluators.HeldOut:
    """The held-out evaluator: eval_batches (or num_batches) fixed batches with fixed masks
    (a Run or a PhaseRun: the phase's seq_len and batch size)."""
    cfg = run.config
    return evaluators.HeldOut(run.eval_fn, run.valid_rows, cfg.train.batch_size,
                              num_batches or cfg.train.eval_batches,
                              objectives.OBJECTIVES[cfg.objective].eval_keys, run.trainer.shard,
                              prefix=prefix)


def _evaluate(prun: PhaseRun):
    """The loop's evaluation: held-out metrics of the parameters, and of their EMA."""
    if prun.valid_rows is None:
        return None
    on_params = evaluators.as_callback([held_out(prun)])
    on_ema = held_out(prun, prefix="eval_ema/")

    def evaluate(state, step: int, last: dict) -> dict:
        out = on_params(state, step, last)
        ema = optimizer.ema_params(state.opt_state)
        if ema is not None:
            out.update(on_ema(ema, step))
        return out
    return evaluate


def _declared(run: Run, prun: PhaseRun, workdir: str) -> list:
    """config.evals for this phase: its model, seq_len and held-out set."""
    cfg = prun.config
    if not cfg.get("evals"):
        return []
    held = None if prun.valid_rows is None else (
        lambda n: held_out(prun, prefix="", num_batches=n))
    context = evals.Context(cfg.model, run.tokenizer, workdir, cfg.data.seq_len, held)
    return evals.build(cfg.evals, cfg.train.checkpoint_every, context)


def _evaluate_start(run: Run, prun: PhaseRun, state, writer, step: int) -> None:
    """The held-out figures of the source itself, at the step the run starts from, under
    the run's protocol: where the curve begins (a row of metrics.jsonl)."""
    evaluate = _evaluate(prun)
    if evaluate is None:
        return
    row = evaluate(state, step, {})
    writer.write(step, row)
    report(f"step {step} (init_from {run.config.init_from}, before training): " + ", ".join(
        f"{k}={v:.4g}" for k, v in row.items()))


def data_passes(rows: int, steps: int, batch_size: int, seq_len: int) -> str:
    """How many times the run reads its training data (the main job reads the 435k-token
    stdlib corpus 11 times); past a few passes the train/held-out gap is worth watching."""
    epochs = steps * batch_size / max(rows, 1)
    line = (f"data: {rows:,} training rows of {seq_len} tokens; {steps:,} steps x {batch_size} "
            f"rows read it {epochs:.1f} times")
    if epochs > 4:
        line += " (many passes over a small corpus: watch the train/held-out gap)"
    return line


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
        loaded = _checkpoint_at(init_from, step, None)[0]["params"]
    else:
        loaded = (src or sources.load(init_from)).params
    rep = sources.LoadReport()
    out = sources.merge_params(params, loaded, shardings, report=rep,
                               fresh=tuple(sources.fresh_prefixes(allowed)))
    said = rep.check(init_from, MAY_START_FRESH, MAY_GO_UNUSED, allowed)
    return out, [rep.summary(init_from)] + said


def _checkpoint_at(workdir: str, step: int, abstract):
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


def train(config, workdir: str, devices=None) -> dict:
    """Runs (or resumes) pretraining; returns the last train and eval metrics."""
    if any(v is None for v in config.model.values()):  # experiments/continue.py
        config = config.copy_and_resolve_references()
        for line in sources.fill_from_source(config, config_lib.model_config("tiny")):
            report(f"from {config.init_from}: {line}")
    source_path = sources.split_step(config.init_from)[0]  # WORKDIR@STEP: the workdir
    if config.init_from and not config.init_from.startswith("hf:") and not os.path.isdir(
            source_path) and not store.has_checkpoint(workdir):  # resume needs no source
        if os.path.exists(source_path):
            raise ValueError(f"init_from={config.init_from!r} is a file; it takes a workdir of "
                             "this codebase, a params folder, or hf:DIR (a HuggingFace folder)")
        raise FileNotFoundError(f"init_from={config.init_from!r}: {source_path} does not exist")
    validate(config)  # before the workdir is touched: a refused config writes nothing
    check_fits(config, devices)
    if config.init_from and config.data.tokenizer and not store.has_checkpoint(workdir):
        from encoder.data import tokenizer as tokenizer_lib  # before any data is prepared
        sources.check_tokenizer(config.init_from, sources.load_tokenizer(config.init_from),
                                tokenizer_lib.load(config.data.tokenizer),
                                f"data.tokenizer={config.data.tokenizer}")
    with workdir_lib.claim(workdir, config, MUTABLE, primary=jax.process_index() == 0,
                           defaults=config_lib.base_config()):
        phases_lib.check_appended(workdir, config)
        with store.disk_full_named(workdir):
            result = _train(config, workdir, devices)
        if not result.get("stopped") and jax.process_index() == 0:
            workdir_lib.record_finished(workdir, step=result["step"])
        return result


def _start_full(run: Run, workdir: str):
    """init_state=full: the run's initial state is the source's checkpoint (params,
    optimizer state, step); returns its (data_state, step) or (None, None)."""
    cfg = run.config
    if cfg.get("init_state", "params") != "full" or store.has_checkpoint(workdir):
        return None, None
    run.trainer.initial_state = None  # freed before the source's state is read
    path, at = sources.split_step(cfg.init_from)  # WORKDIR@STEP is init_step=STEP
    state, data_state, _, step = _checkpoint_at(path, cfg.get("init_step", -1) if at is None
                                                else at, run.trainer.abstract_state())
    run.trainer.initial_state = state
    report(f"starting from {cfg.init_from} at step {step} (parameters, optimizer state and "
           "data position)")
    return data_state, step


def _source_init(run: Run, workdir: str, said: list):
    """init(params, shardings) from init_from (a resume needs no source), after checking it
    computes this model with this tokenizer; its load report goes into `said`."""
    cfg = run.config
    if not cfg.init_from or store.has_checkpoint(workdir):
        return None
    src = sources.load(cfg.init_from)
    check_source(cfg, src, run.tokenizer)
    if cfg.get("init_state", "params") != "params":
        return None  # init_state=full: _start_full takes the whole state

    def init(params, shardings):
        out, lines = load_init_params(cfg.init_from, params, shardings,
                                      cfg.get("init_step", -1), src, cfg.get("init_fresh", ""))
        said.extend(lines)
        return out
    return init


def _describe(run: Run, workdir: str, step0: int) -> int:
    """The run's opening lines; returns the model's parameter count."""
    cfg, plan = run.config, run.plan
    if step0 >= plan.total_steps:
        report(f"{workdir} already holds a finished run (step {step0} of "
               f"{plan.total_steps}); raise train.num_steps"
               + (" or append a phase" if cfg.get("phases") else "") + " to train further")
    n_params, n_model = objectives.parameter_count(cfg)
    report(f"model: {cfg.objective}, size {cfg.model.size}, {n_model:,} parameters"
           + (f" ({n_params:,} with the generator)" if n_params != n_model else ""))
    for line in plan.describe() if cfg.get("phases") else ():
        report(line)
    return n_model


def _loop_options(run: Run, prun: PhaseRun, phase) -> loop.LoopOptions:
    cfg, pc = run.config, prun.config
    return loop.LoopOptions(
        num_steps=phase.end, log_every=cfg.train.log_every,
        checkpoint_every=cfg.train.checkpoint_every, eval_every=cfg.train.eval_every,
        tokens_per_step=pc.train.batch_size * pc.data.seq_len,
        flops_per_step=prun.flops_per_step,
        peak_flops=cfg.train.peak_flops or flops.peak_flops_per_device(),
        learning_rate=run.plan.schedule, progress=cfg.train.progress, seed=cfg.seed,
        time_budget_s=float(cfg.train.get("time_budget_s", 0.0)))


class _Stream:
    """The training batches across phases: a new iterator when a phase reads another
    stream; only the first phase this process runs resumes a saved position."""

    def __init__(self, run: Run, data_state):
        self.run, self.data_state = run, data_state
        self.it, self.stream = None, None

    def for_phase(self, prun: PhaseRun, phase, step: int):
        if self.it is None or self.stream != phase.stream:
            self.it = pipeline.batch_iterator(
                prun.train_rows, phase.fetch,
                seed=phases_lib.stream_seed(self.run.config.seed, phase),
                process_index=jax.process_index(), process_count=jax.process_count())
            self.stream = phase.stream
            if self.data_state is not None and phases_lib.resumes_stream(phase, step,
                                                                         self.run.plan):
                self.it.set_state(self.data_state)
        self.data_state = None
        return phases_lib.Batches(self.it, phase, step)


def _train(config, workdir: str, devices=None) -> dict:
    evals.check_record(config.get("evals"), config.train.checkpoint_every, workdir)
    run = build(config, workdir, devices)
    cfg, plan = run.config, run.plan
    said: list = []
    init = _source_init(run, workdir, said)
    source_data, _ = _start_full(run, workdir)
    mngr, writer, start = trainer_lib.open_run(run.trainer, workdir, cfg, config,
                                               cfg.train.keep_checkpoints, init)
    if jax.process_index() == 0 and not os.path.exists(os.path.join(workdir, "tokenizer")):
        run.tokenizer.save(os.path.join(workdir, "tokenizer"))  # the workdir is self-contained
    state = start.state
    step0 = int(state.step)
    for line in said:
        report(line)
    n_model = _describe(run, workdir, step0)
    stream = _Stream(run, start.data_state if start.step is not None else source_data)
    evaluate_start = bool(cfg.init_from) and start.step is None
    last, restored_meta = {}, start.meta
    try:
        for phase in plan.phases[plan.index_at(step0):]:
            if step0 >= phase.end:  # a finished run: nothing left
                break
            prun = build_phase(run, phase)
            if evaluate_start:  # the source's figures, before its first step here
                _evaluate_start(run, prun, state, writer, step0)
                evaluate_start = False
            if phase.index == plan.index_at(step0) or not cfg.get("phases"):
                report(data_passes(len(prun.train_rows), phase.steps,
                                   prun.config.train.batch_size, prun.config.data.seq_len))
            state, last = loop.run_loop(
                prun.trainer, state, stream.for_phase(prun, phase, int(state.step)), mngr,
                phases_lib.PhaseWriter(writer, phase, plan), _loop_options(run, prun, phase),
                evaluate=_evaluate(prun), meta={"objective": cfg.objective, "phase": phase.name,
                                                "phase_index": phase.index},
                restored_meta=restored_meta, declared=_declared(run, prun, workdir))
            restored_meta, step0 = None, int(state.step)
            if last.pop("signalled", False):
                last["stopped"] = step0 < plan.total_steps
                break
    finally:
        mngr.close()
        writer.close()
    last.pop("signalled", None)
    last.update(step=int(state.step), parameters=n_model)
    return last
