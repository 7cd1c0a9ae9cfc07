"""Pretraining: the objective's loss on packed rows, through the shared trainer.

    python -m encoder.main --config=experiments/pretrain.py --workdir=DIR

`build(config, workdir)` makes the whole run once (data, tokenizer, objective
context, Trainer with its compiled step, evaluation function) without
touching the caller's config; `train(config, workdir)` resumes or starts it
and runs the shared loop (encoder/train/trainer.py).
"""
import dataclasses
import os
from typing import Any

import jax
from absl import logging

from encoder.checkpoints import sources, store
from encoder.data import pipeline
from encoder.eval import evaluators
from encoder.objectives import objectives, pretraining
from encoder.train import flops, optimizer, partitioning, trainer as trainer_lib
from encoder.train import workdir as workdir_lib
from encoder.train.trainer import report


# Fields a restart may change (logged); any other change is refused (train/workdir.py).
MUTABLE = ("train.num_steps", "train.log_every", "train.eval_every", "train.eval_batches",
           "train.grad_accum_steps",  # the same global batch, cut into other micro-batches
           "train.checkpoint_every", "train.keep_checkpoints", "train.progress",
           "train.peak_flops", "train.debug_nan_at_step", "data.cache_dir", "mesh",
           "distributed", "model.attention_impl", "model.remat")


def validate(config, num_devices: int | None = None) -> None:
    """Every check a pretraining config can get before data or a tokenizer is touched."""
    objectives.validate(config)
    optimizer.validate(config.train)
    trainer_lib.check_train_config(config.train, num_devices)
    for name in ("num_steps", "log_every", "checkpoint_every"):
        if config.train[name] <= 0:
            raise ValueError(f"train.{name} must be positive, got {config.train[name]}")
    if config.train.eval_every and config.train.eval_batches <= 0:
        raise ValueError(f"train.eval_batches must be positive when eval_every > 0, got "
                         f"{config.train.eval_batches}")


@dataclasses.dataclass(frozen=True)
class Run:
    """Everything a pretraining run holds besides the loop's local variables."""
    config: Any               # the resolved copy (vocab_size = the tokenizer's)
    workdir: str
    mesh: Any
    tokenizer: Any
    ctx: Any                  # objectives.ObjectiveContext
    trainer: trainer_lib.Trainer
    train_rows: Any           # random-access row sources (encoder.data.pipeline)
    valid_rows: Any
    eval_fn: Any
    flops_per_step: float


def _barrier(name: str) -> None:
    """All processes wait here (after process 0 prepared data or trained a tokenizer)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def build(config, workdir: str, devices=None) -> Run:
    """The run, built once: data, tokenizer, objective, trainer and evaluation."""
    config = config.copy_and_resolve_references()  # never mutate the caller's config
    mesh = partitioning.make_mesh(config.mesh, devices)
    validate(config, mesh.devices.size)
    data = pipeline.open_pretraining_data(config.data, workdir, config.model.vocab_size,
                                          config.pair_task, config.seed,
                                          primary=jax.process_index() == 0, barrier=_barrier)
    logging.info("data: %s", data.description)
    if data.valid is None and config.train.eval_every:
        raise ValueError(f"no held-out document to evaluate on ({data.description}): raise "
                         f"data.valid_fraction (now {config.data.valid_fraction}), give "
                         "data.valid_files, or set train.eval_every=0")
    tok = data.tokenizer
    if tok.vocab_size != config.model.vocab_size:
        # The tokenizer defines the vocabulary (sentencepiece stops early on a small corpus).
        logging.warning("model.vocab_size %d -> %d, the tokenizer's size",
                        config.model.vocab_size, tok.vocab_size)
        config.model.vocab_size = tok.vocab_size
    step = pretraining.build(config, tok, pretraining.most_frequent_token(data.token_counts,
                                                                          tok.special_ids))
    trainer = trainer_lib.Trainer(
        mesh, optimizer.make_optimizer(config.train), step.init_params, loss_fn=step.loss_fn,
        prepare=step.prepare, seed=config.seed, grad_accum=config.train.grad_accum_steps,
        nan_at_step=config.train.debug_nan_at_step)
    return Run(config, workdir, mesh, tok, step.ctx, trainer, data.train, data.valid,
               trainer.jit_eval(step.eval_step), flops.config_train_flops_per_step(config))


def held_out(run: Run) -> evaluators.HeldOut:
    """The held-out evaluator: eval_batches fixed batches with fixed masks."""
    cfg = run.config
    return evaluators.HeldOut(run.eval_fn, run.valid_rows, cfg.train.batch_size,
                              cfg.train.eval_batches,
                              objectives.OBJECTIVES[cfg.objective].eval_keys, run.trainer.shard)


def data_passes(rows: int, steps: int, batch_size: int, seq_len: int) -> str:
    """How many times the run reads its training data (the main job reads the 435k-token
    stdlib corpus 11 times); past a few passes the train/held-out gap is worth watching."""
    epochs = steps * batch_size / max(rows, 1)
    line = (f"data: {rows:,} training rows of {seq_len} tokens; {steps:,} steps x {batch_size} "
            f"rows read it {epochs:.1f} times")
    if epochs > 4:
        line += " (many passes over a small corpus: watch the train/held-out gap)"
    return line


def load_init_params(init_from: str, params, shardings):
    """Copies the subtrees an init source has (a workdir, params folder or hf:DIR) into params."""
    return sources.merge_params(params, sources.load(init_from).params, shardings)


def train(config, workdir: str, devices=None) -> dict:
    """Runs (or resumes) pretraining; returns the last train and eval metrics."""
    if config.init_from and not config.init_from.startswith("hf:") and not os.path.isdir(
            config.init_from) and not store.has_checkpoint(workdir):  # resume needs no source
        raise FileNotFoundError(f"init_from={config.init_from!r} does not exist")
    with workdir_lib.claim(workdir, config, MUTABLE, primary=jax.process_index() == 0):
        result = _train(config, workdir, devices)
        if not result.get("stopped") and jax.process_index() == 0:
            workdir_lib.record_finished(workdir, step=result["step"])
        return result


def _train(config, workdir: str, devices=None) -> dict:
    run = build(config, workdir, devices)
    cfg = run.config
    init = (lambda p, s: load_init_params(cfg.init_from, p, s)) if cfg.init_from else None
    mngr, writer, start = trainer_lib.open_run(run.trainer, workdir, cfg, config,
                                               cfg.train.keep_checkpoints, init)
    state, data_state = start.state, start.data_state
    if start.step is not None and start.step >= cfg.train.num_steps:
        report(f"{workdir} already holds a finished run (step {start.step} of "
               f"{cfg.train.num_steps}); raise train.num_steps to train further")
    n_params, n_model = objectives.parameter_count(cfg)
    report(f"model: {cfg.objective}, size {cfg.model.size}, {n_model:,} parameters"
           + (f" ({n_params:,} with the generator)" if n_params != n_model else ""))
    report(data_passes(len(run.train_rows), cfg.train.num_steps, cfg.train.batch_size,
                       cfg.data.seq_len))
    it = pipeline.batch_iterator(run.train_rows, cfg.train.batch_size, seed=cfg.seed,
                                 process_index=jax.process_index(),
                                 process_count=jax.process_count())
    if data_state is not None:
        it.set_state(data_state)
    opts = trainer_lib.LoopOptions(
        num_steps=cfg.train.num_steps, log_every=cfg.train.log_every,
        checkpoint_every=cfg.train.checkpoint_every, eval_every=cfg.train.eval_every,
        tokens_per_step=cfg.train.batch_size * cfg.data.seq_len,
        flops_per_step=run.flops_per_step,
        peak_flops=cfg.train.peak_flops or flops.peak_flops_per_device(),
        learning_rate=optimizer.learning_rate_schedule(cfg.train),
        progress=cfg.train.progress, seed=cfg.seed)
    try:
        state, last = trainer_lib.run_loop(
            run.trainer, state, it, mngr, writer, opts,
            evaluate=evaluators.as_callback([held_out(run)] if run.valid_rows is not None
                                            else []),
            meta={"objective": cfg.objective}, restored_meta=start.meta)
    finally:
        mngr.close()
        writer.close()
    last["step"] = int(state.step)
    last["parameters"] = n_model
    return last
