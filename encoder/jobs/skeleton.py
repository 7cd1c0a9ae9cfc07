"""The one job skeleton, read top to bottom (nanodo's train_and_evaluate):

    claim the workdir                      (one run at a time; a changed config refused)
    exp   = build(config)                  (an Experiment: encoder/train/experiment.py)
    state = exp.start(mngr)                (restored, from a source, or fresh)
    for each segment from the state's step: run the loop (a step, then periodic actions)
    finish                                 (the job's result; the run recorded finished)

Pretraining (encoder/jobs/pretrain.py) and fine-tuning (encoder/jobs/finetune.py) are
this skeleton with their own `build`.
"""
from typing import Callable

import jax

from encoder.checkpoints import store
from encoder.train import experiment as experiment_lib, loop, trainer as trainer_lib
from encoder.train import workdir as workdir_lib


def run(config, workdir: str, build: Callable, mutable: tuple, devices=None,
        defaults=None, on_claim: Callable = lambda: None) -> dict:
    """Claims the workdir, builds the experiment in it and trains it; returns its result
    (with "stopped" when a signal or budget ended it before its last step)."""
    primary = jax.process_index() == 0
    with workdir_lib.claim(workdir, config, mutable, primary=primary, defaults=defaults):
        on_claim()
        with store.disk_full_named(workdir):
            result = train_and_evaluate(build(config, workdir, devices))
        if not result.get("stopped") and primary:
            workdir_lib.record_finished(workdir, step=result.get("step"))
        return result


def train_and_evaluate(exp: experiment_lib.Experiment) -> dict:
    """Starts (or resumes) the experiment's state and runs each segment's loop."""
    n = store.checkpoints_to_write(exp.workdir, exp.keep_checkpoints)
    store.check_room(exp.workdir, n * store.state_bytes(exp.trainer.abstract_state()),
                     "a checkpoint" if n == 1 else f"{n} checkpoints",  # before the first
                     f"train.keep_checkpoints={exp.keep_checkpoints}")  # step, not at a save
    mngr = store.manager(exp.workdir, exp.keep_checkpoints)
    start = exp.start(mngr)
    writer = trainer_lib.open_records(exp.trainer, exp.workdir, exp.config, exp.requested,
                                      start)
    state, data_state, meta, last, batches = start.state, start.data_state, start.meta, {}, None
    try:
        exp.begin(start, writer)
        for seg in exp.segments:
            if int(state.step) >= seg.end:
                continue
            parts = seg.parts
            batches = parts.batches(data_state, int(state.step), batches)
            state, last = loop.run_loop(parts.steps, state, batches, mngr,
                                        parts.writer(writer), parts.options, parts.evaluators,
                                        parts.meta, meta)
            data_state = meta = None
            if last.pop("signalled", False):
                last["stopped"] = int(state.step) < exp.total_steps
                break
    finally:
        mngr.close()
        writer.close()
    last.pop("signalled", None)
    return exp.finish(state, {**last, "step": int(state.step)})
