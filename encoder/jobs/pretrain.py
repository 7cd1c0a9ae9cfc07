"""Pretraining: the objective's loss on packed rows, as an Experiment the job skeleton runs.

    python -m encoder run --config=experiments/pretrain.py --workdir=DIR

`train(config, workdir)` validates the config once (the phase plan with it), claims the
workdir and runs `build`'s Experiment (encoder/jobs/skeleton.py): one segment per phase
(config.phases; one phase "main" when none is declared), each with its own step (a new
seq_len, masking rate or RoPE base recompiles it), data stream and held-out rows, over
one train state and one optimizer whose learning rate is the phases' schedules joined.
The state comes from the workdir's checkpoint, init_from (encoder/jobs/pretrain_sources.py)
or a fresh init. With train.ema_decay > 0 the held-out metrics are also reported for the
parameter EMA (eval_ema/...).
"""
import dataclasses
import os
from typing import Any

import jax
from absl import logging

from encoder import config as config_lib, errors
from encoder.aot import chips
from encoder.checkpoints import store
from encoder.data import pipeline
from encoder.interop import origin
from encoder.eval import evaluators
from encoder.jobs import evals, pretrain_checks, pretrain_sources, skeleton
from encoder.jobs.pretrain_checks import check_fits, validate  # noqa: F401 (the job's checks)
from encoder.objectives import objectives, pretraining
from encoder.train import experiment as experiment_lib, flops, loop, metrics_io, optimizer
from encoder.train import partitioning, phases as phases_lib, trainer as trainer_lib
from encoder.train.loop import report

# Fields a restart may change (logged); any other change is refused (train/workdir.py).
MUTABLE = ("train.num_steps", "train.log_every", "train.eval_every", "train.eval_batches",
           "train.grad_accum_steps",  # the same global batch, cut into other micro-batches
           "train.checkpoint_every", "train.keep_checkpoints", "train.progress",
           "train.peak_flops", "train.debug_nan_at_step", "data.cache_dir", "mesh",
           "distributed", "model.attention_impl", "model.remat",
           "evals",   # what is scored along the way, not what is trained
           "phases")  # appended phases only (phases.check_appended)


def train(config, workdir: str, devices=None) -> dict:
    """Runs (or resumes) pretraining; returns the last train and eval metrics."""
    config = pretrain_sources.filled(config)
    pretrain_sources.check_init_from(config, workdir)
    mesh = partitioning.make_mesh(config.mesh, devices)
    plan = validate(config, mesh.devices.size)  # before the workdir is touched
    check_fits(config, plan, devices)
    pretrain_sources.check_tokenizer(config, workdir)
    return skeleton.run(
        config, workdir, lambda c, w, d: build(c, w, mesh, plan), MUTABLE, devices,
        defaults=config_lib.base_config(),
        on_claim=lambda: (phases_lib.check_appended(workdir, config),
                          evals.check_record(config.get("evals"),
                                             config.train.checkpoint_every, workdir)))


@dataclasses.dataclass
class Run:
    """What a pretraining run's segments share: the resolved config, the trainer, the
    tokenizer, the phase plan, the first phase's data and step pieces (built with the
    run) and the segments themselves."""
    config: Any
    workdir: str
    trainer: trainer_lib.Trainer
    tokenizer: Any
    plan: phases_lib.Plan
    mft: int                  # the most frequent token: the MLM baseline's answer
    first: tuple              # (data, step pieces) of phase 0
    segments: tuple = ()


def _barrier(name: str) -> None:
    """All processes wait here (after process 0 prepared data or trained a tokenizer)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def _open_data(cfg, workdir: str, where: str = ""):
    data = pipeline.open_pretraining_data(cfg.data, workdir, cfg.model.vocab_size,
                                          cfg.pair_task, cfg.seed,
                                          primary=jax.process_index() == 0, barrier=_barrier)
    if data.valid is None and cfg.train.eval_every:
        from encoder.data import shards
        prepared = shards.is_prepared(str(cfg.data.train_files))
        raise ValueError(
            f"{where}no held-out document to evaluate on ({data.description}): "
            + ("a prepared corpus keeps the split prepare made: prepare it again with a "
               "larger --valid_fraction (and more than one document)" if prepared else
               f"raise data.valid_fraction (now {cfg.data.valid_fraction})")
            + ", give data.valid_files, or set train.eval_every=0")
    return data


def build(config, workdir: str, mesh, plan: phases_lib.Plan) -> experiment_lib.Experiment:
    """The run as one Experiment: the first phase's data and tokenizer, the vocabulary set
    in every phase's config, the optimizer of all phases, and a segment per phase."""
    requested, config = config, config.copy_and_resolve_references()
    data = _open_data(plan.phases[0].config, workdir)
    logging.info("data: %s", data.description)
    tok = data.tokenizer
    line = pretrain_checks.unknown_tokens(data.token_counts, tok, bool(config.init_from))
    if line:
        report(line)
    vocab = pretrain_sources.vocabulary(config, tok.vocab_size)
    for c in [config] + [ph.config for ph in plan.phases]:
        c.model.vocab_size, c.model.real_vocab_size = vocab
    if config.get("phases"):
        config.train.num_steps = plan.total_steps  # derived: the phases' steps
    mft = pretraining.most_frequent_token(data.token_counts, tok.special_ids)
    first = pretraining.build(plan.phases[0].config, tok, mft)
    tx = optimizer.make_optimizer(config.train, plan.schedule, plan.peak_learning_rate)
    trainer = trainer_lib.Trainer(mesh, tx, first.init_params, seed=config.seed,
                                  nan_at_step=config.train.debug_nan_at_step)
    resuming, said = store.has_checkpoint(workdir), []
    init = None if resuming else pretrain_sources.source_init(config, tok, said)
    other = None if resuming else pretrain_sources.full_start(config, trainer)
    run = Run(config, workdir, trainer, tok, plan, mft, (data, first))
    segments = run.segments = tuple(experiment_lib.Segment(
        ph.name, ph.index, ph.start, ph.end, lambda ph=ph: _segment(run, ph))
        for ph in plan.phases)
    return experiment_lib.Experiment(
        config, requested, workdir, trainer,
        lambda mngr: trainer_lib.start_state(trainer, mngr, init, other), segments,
        config.train.keep_checkpoints, begin=lambda start, writer: _begin(run, start, writer,
                                                                          said),
        finish=lambda state, last: {**last, "parameters": objectives.parameter_count(config)[1]})


def _segment(run: Run, phase) -> experiment_lib.Parts:
    """A phase's step, batches and evaluators over the run's state and optimizer."""
    cfg, trainer, plan, tok = phase.config, run.trainer, run.plan, run.tokenizer
    if phase.index == 0:
        data, pieces = run.first
    else:
        data = _open_data(cfg, run.workdir, f"phase {phase.name!r}: ")
        if data.tokenizer.fingerprint() != tok.fingerprint():
            raise ValueError(f"phase {phase.name!r}: its data's tokenizer is not the run's "
                             f"({data.tokenizer.vocab_size} and {tok.vocab_size} tokens): "
                             "prepare the phase's data with the run's tokenizer")
        pieces = pretraining.build(cfg, tok, run.mft)
    steps = trainer_lib.Steps(trainer, pieces.loss_fn, pieces.prepare, cfg.train.batch_size,
                              cfg.train.grad_accum_steps, phase.micro)
    base = run.config
    options = loop.LoopOptions(
        num_steps=phases_lib.end_of(phase, data.train, plan, base.seed),
        log_every=base.train.log_every, checkpoint_every=base.train.checkpoint_every,
        tokens_per_step=cfg.train.batch_size * cfg.data.seq_len,
        flops_per_step=flops.config_train_flops_per_step(cfg),
        peak_flops=base.train.peak_flops or chips.peak_flops_per_device(),
        learning_rate=plan.schedule, progress=base.train.progress, seed=base.seed,
        time_budget_s=float(base.train.get("time_budget_s", 0.0)))

    def batches(data_state, step: int, previous):
        report(pretrain_checks.data_passes(len(data.train), phase.steps, cfg.train.batch_size,
                           cfg.data.seq_len))
        if previous is not None and previous.phase.stream == phase.stream:
            return phases_lib.Batches(previous.stream, phase, step)
        it = pipeline.batch_iterator(
            data.train, phase.fetch, seed=phases_lib.stream_seed(base.seed, phase),
            process_index=jax.process_index(), process_count=jax.process_count())
        if data_state is not None and phases_lib.resumes_stream(phase, step, plan):
            it.set_state(data_state)
        elif hasattr(it, "carry"):  # a mixture counts the run's earlier streams' figures
            it.carry(previous.stream if previous is not None else data_state)
        return phases_lib.Batches(it, phase, step)

    held = None if data.valid is None else trainer.jit_eval(pieces.eval_step)
    return experiment_lib.Parts(
        steps, batches, _evaluators(run, cfg, data.valid, held, base.train.eval_every),
        options, {"objective": base.objective, "phase": phase.name,
                  "phase_index": phase.index},
        writer=lambda w: phases_lib.PhaseWriter(w, phase, plan))


def held_out(cfg, eval_fn, rows, shard, prefix: str = "eval/", num_batches: int = 0):
    """eval_batches (or num_batches) fixed held-out batches with fixed masks."""
    return evaluators.HeldOut(eval_fn, rows, cfg.train.batch_size,
                              num_batches or cfg.train.eval_batches,
                              objectives.OBJECTIVES[cfg.objective].eval_keys, shard,
                              prefix=prefix)


def _evaluators(run: Run, cfg, valid, eval_fn, every: int) -> list:
    """The held-out figures (every train.eval_every steps), then config.evals."""
    shard = run.trainer.shard
    out = [] if valid is None else [evaluators.HeldOutFigures(
        held_out(cfg, eval_fn, valid, shard), held_out(cfg, eval_fn, valid, shard, "eval_ema/"),
        optimizer.ema_params, every)]
    if cfg.get("evals"):
        held = None if valid is None else (
            lambda n: held_out(cfg, eval_fn, valid, shard, prefix="", num_batches=n))
        context = evals.Context(cfg.model, run.tokenizer, run.workdir, cfg.data.seq_len,
                                held)
        record = metrics_io.ScoreRecord(run.workdir, jax.process_index() == 0)
        out += [evaluators.Recorded(ev, record)
                for ev in evals.build(cfg.evals, cfg.train.checkpoint_every, context)]
    return out


def _begin(run: Run, start, writer, said: list) -> None:
    """The run's opening lines; a run started from a source first scores the source."""
    cfg, plan, workdir = run.config, run.plan, run.workdir
    if jax.process_index() == 0 and not os.path.exists(os.path.join(workdir, "tokenizer")):
        run.tokenizer.save(os.path.join(workdir, "tokenizer"))  # a self-contained workdir
    if jax.process_index() == 0:  # the source's pooling, pooler, length: for its export
        origin.carry(cfg.init_from, workdir)
    for line in said:
        report(line)
    step0 = int(start.state.step)
    if step0 >= plan.total_steps:
        report(f"{workdir} already holds a finished run (step {step0} of "
               f"{plan.total_steps}); raise train.num_steps"
               + (" or append a phase" if cfg.get("phases") else "") + " to train further")
    n_params, n_model = objectives.parameter_count(cfg)
    report(f"model: {cfg.objective}, size {cfg.model.size}, {n_model:,} parameters"
           + (f" ({n_params:,} with the generator)" if n_params != n_model else ""))
    for line in plan.describe() if cfg.get("phases") else ():
        report(line)
    if cfg.init_from and start.step is None and step0 < plan.total_steps:
        seg = next(s for s in run.segments if step0 < s.end)
        held = [ev for ev in seg.parts.evaluators if isinstance(ev, evaluators.HeldOutFigures)]
        if held:  # where the curve begins: the source's figures under this run's protocol
            row = held[0](start.state, step0, {})
            errors.stop_if_non_finite(row, step0, workdir)  # a NaN start is no curve
            writer.write(step0, row)
            report(f"step {step0} (init_from {cfg.init_from}, before training): " + ", ".join(
                f"{k}={v:.4g}" for k, v in row.items()))
