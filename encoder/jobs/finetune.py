"""The fine-tuning job: a start source, a Task, and the shared trainer.

    python -m encoder run --config=experiments/finetune.py:task=classification \\
        --config.init_from=SOURCE --config.data.train_file=... --config.data.dev_file=... \\
        [--config.data.test_file=...] --workdir=DIR

SOURCE is any workdir of this codebase (pretraining or fine-tuning), a params
folder, or hf:DIR (encoder/checkpoints/sources.py). The encoder always comes
from the source; a fine-tuned source's head too when it was trained for the
same task type and labels, or for a label map the training file continues (most of
its labels in it: the map is kept, a rare label the file lacks is still known, new
labels get new rows after the old ones). Training goes through encoder/train/loop.py:
the sharded, donated step (data and fsdp mesh axes), checkpoints every N
steps, at each epoch's end and on SIGTERM/Ctrl-C, exact resume within an
epoch, the non-finite stop. Dev is scored at every epoch's end; the best
epoch's parameters are kept in DIR/best/ (itself a valid init_from), and
DIR/eval.json and DIR/predictions.jsonl are written from them.
"""
import dataclasses
import json
import math
import os
import shutil
from typing import Any

import jax
import numpy as np
from absl import logging

from encoder import ranges, registry
from encoder.checkpoints import sources, store
from encoder.data import overlap, pipeline, tokenizer as tokenizer_lib
from encoder.eval import evaluators, inference
from encoder.finetune import defaults, frozen, lora
from encoder.interop import origin
from encoder.tasks.base import LabelSet, Task, TaskDataError
from encoder.tasks import files as task_files
from encoder.tasks.table import TASKS
from encoder.model import models
from encoder.model.encoder import encoder_params
from encoder.train import metrics_io, optimizer as optimizer_lib, partitioning
from encoder.jobs import skeleton
from encoder.train import experiment as experiment_lib, finetune_step, loop
from encoder.train import trainer as trainer_lib


def validate(config, num_devices: int | None = None) -> None:
    """Names and numbers of a fine-tuning config, checked before anything is loaded."""
    ranges.check(config)  # every number in its range, first (encoder/ranges.py)
    registry.lookup(TASKS, config.task, "task")
    registry.lookup(dict.fromkeys(frozen.MODES), config.finetune.mode, "fine-tuning mode")
    task_files.refuse_training_files_as_held_out(
        config.data.train_file, **{f"--config.data.{k}": config.data.get(k, "")
                                   for k in ("dev_file", "test_file")})
    models.validate_pooling(config.pooling)
    sources.check_init_fields(config)
    trainer_lib.check_train_config(config.train, num_devices)
    if config.train.num_epochs < 0:
        raise ValueError(f"train.num_epochs must be >= 0 (0: by model size), got "
                         f"{config.train.num_epochs}")
    if not config.data.train_file:
        raise ValueError("fine-tuning needs --config.data.train_file")
    if config.finetune.mode == "lora" and config.finetune.lora_rank <= 0:
        raise ValueError(f"finetune.lora_rank must be positive, got {config.finetune.lora_rank}")
    if not 0 < config.finetune.layer_decay <= 1:
        raise ValueError(f"finetune.layer_decay must be in (0, 1], got "
                         f"{config.finetune.layer_decay}")


def load_source(config) -> sources.Pretrained:
    """The start source, or (no init_from) a fresh model over data.tokenizer."""
    if config.init_from:
        return sources.load(config.init_from)
    if not config.data.tokenizer:
        raise ValueError("training from scratch (no init_from) needs data.tokenizer")
    tok = tokenizer_lib.load(config.data.tokenizer)
    cfg = config.model.copy_and_resolve_references()
    cfg.vocab_size = tok.vocab_size
    return sources.Pretrained(cfg, None, tok, kind="scratch")


@dataclasses.dataclass
class Split:
    examples: list
    arrays: dict
    meta: Any

    @property
    def rows(self) -> int:
        return len(next(iter(self.arrays.values())))


@dataclasses.dataclass
class FineTuning:
    """A fine-tuning run, built once."""
    config: Any               # resolved copy (size defaults filled in)
    workdir: str
    source: sources.Pretrained
    task: Task
    model_cfg: Any
    model: Any
    splits: dict              # train (a file's) / dev / test -> Split
    train_source: Any         # the training rows: pipeline.Rows, or a prepared corpus's
    trainer: trainer_lib.Trainer
    train_cfg: Any            # the optimizer's view (num_steps, warmup)
    steps_per_epoch: int
    total_steps: int
    loss_fn: Any = None       # (params, batch, rng) -> (loss, metrics)

    def effective(self, params):
        f = self.config.finetune
        return lora.effective(params, f.lora_alpha, f.lora_rank)


def _read_labels(workdir: str):
    path = os.path.join(workdir, "labels.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None


def start_labels(src: sources.Pretrained, config) -> LabelSet | None:
    """A fine-tuned starting point's label map, where it was trained for this task type
    (Task.fit_labels keeps it when the training file continues that task)."""
    if src.kind != "finetuning" or src.task != config.task or not src.labels:
        return None
    return LabelSet(list(src.labels), source=f"init_from={config.init_from}")


def _say_labels(labels: LabelSet | None, src: sources.Pretrained) -> None:
    """One line when the starting point's label map was kept (and what the file added)."""
    if labels is None or not labels.source:
        return
    added = labels.names[len(src.labels):]
    logging.warning("labels: %s's label map kept (%d labels, head rows and all)%s",
                    labels.source, len(src.labels),
                    f"; the training file adds {added}" if added else "")


def build(config, workdir: str, devices=None, mesh=None) -> FineTuning:
    """The run's pieces (a mesh given: its config was validated on it already)."""
    config = config.copy_and_resolve_references()
    if mesh is None:
        mesh = partitioning.make_mesh(config.mesh, devices)
        validate(config, mesh.devices.size)
    src = load_source(config)
    defaults.resolve(config, src.model_cfg.hidden_size, src.model_cfg.num_layers)
    model_cfg = finetune_step.model_config(config, src.model_cfg)
    models.validate_config(model_cfg, config.data.max_seq_len)

    # A resumed run keeps its label order (the head's rows); a failed attempt without a
    # checkpoint does not bind the next one.
    saved = _read_labels(workdir) if store.has_checkpoint(workdir) else None
    task = TASKS[config.task](config, src.tokenizer, labels=saved)
    train_source = task.training_source(config.data.train_file)
    splits = {}
    if train_source is None:  # a file: read, checked and featurized in memory
        train_ex = task.read(config.data.train_file, "train")
        task.fit_labels(train_ex, start_labels(src, config))
        if saved is None:
            _say_labels(task.labels, src)
        splits["train"] = Split(train_ex, *task.featurize(train_ex))
        rows = dict(splits["train"].arrays)
        rows["weight"] = np.ones(splits["train"].rows, np.float32)  # every row is real
        train_source = pipeline.Rows(rows)
    held = {name: task.read(config.data[f"{name}_file"], name) for name in ("dev", "test")
            if config.data[f"{name}_file"]}
    if "train" in splits:  # held out by content, not only by path (encoder/data/overlap.py)
        for line in task_files.refuse_training_rows(
                splits["train"].examples, config.data.train_file,
                {f"--config.data.{n}_file": (config.data[f"{n}_file"], ex)
                 for n, ex in held.items()}, config.data.get("max_held_out_overlap", 0.01),
                "--config.data.max_held_out_overlap"):
            overlap.say(line, quiet=jax.process_index() != 0)
    for name, ex in held.items():
        splits[name] = Split(ex, *task.featurize(ex))
    bs = config.train.batch_size
    n_train = len(train_source)
    if n_train < bs:
        raise TaskDataError(f"{config.data.train_file}: {n_train} training rows, fewer than one "
                            f"batch of {bs}: lower --config.train.batch_size")
    steps_per_epoch = n_train // bs
    total = config.train.num_steps or steps_per_epoch * config.train.num_epochs

    step = finetune_step.build(config, task, model_cfg, total)
    trainer = trainer_lib.Trainer(mesh, step.tx, step.init_params, seed=config.seed)
    return FineTuning(config, workdir, src, task, model_cfg, step.model, splits, train_source,
                      trainer, step.train_cfg, steps_per_epoch, total, step.loss_fn)


def head_rows(src: sources.Pretrained, task: str, labels: LabelSet | None) -> str:
    """How a source's head fits this run's: "same" (the same task type and rows), "grown"
    (its label map kept and extended: its rows first, the new labels' after) or "" (none)."""
    if src.task != task:
        return ""
    if labels is None or src.labels == labels.names:
        return "same"
    if src.labels and labels.source and labels.names[:len(src.labels)] == list(src.labels):
        return "grown"
    return ""


def init_from_source(run: FineTuning):
    """params, shardings -> params with the source's encoder (and head, where it fits)."""
    src = run.source
    if src.params is None or run.config.finetune.random_init:
        return None

    def init(params, shardings):
        model = dict(params["model"])
        rep = sources.LoadReport()
        model["encoder"] = sources.merge_params(model["encoder"], encoder_params(src.params),
                                                shardings["model"]["encoder"], strict=True,
                                                path="encoder", report=rep, fresh=tuple(
                                                    sources.fresh_prefixes(
                                                        run.config.get("init_fresh", ""))))
        rep.check(run.config.init_from, {}, {}, run.config.get("init_fresh", ""))  # all of it
        head, merge = None, sources.merge_params
        rows = head_rows(src, run.config.task, run.task.labels) if "head" in src.params else ""
        if rows == "same" and sources.shapes_match(src.params["head"], model["head"]):
            head = src.params["head"]
        elif rows == "grown":  # the source's rows first (their meaning kept), new ones fresh
            head, merge = src.params["head"], sources.merge_rows
        elif not rows and "pooler" in src.params and "pooler" in model.get("head", {}):
            head = {"pooler": src.params["pooler"]}  # BERT's pooler for cls_tanh pooling
        if head is not None:
            model["head"] = merge(model["head"], head, shardings["model"]["head"], path="head")
        mlm = "mlm_head" in model and "mlm_head" in src.params  # a sparse retriever's start
        if mlm:
            model["mlm_head"] = sources.merge_params(model["mlm_head"], src.params["mlm_head"],
                                                     shardings["model"]["mlm_head"],
                                                     path="mlm_head")
        others = sorted(k for k in src.params if k not in ("encoder", "head", "pooler")
                        and not (mlm and k == "mlm_head"))
        loop.report(rep.summary(run.config.init_from) + (
            " and the head" if head is not None else "; the task head starts fresh")
            + (" (the MLM head: the source's)" if mlm else "")
            + ("; the source has no MLM head: the sparse head's starts fresh, and a fresh head "
               "starts dense (every term non-zero; docs/retrieval.md, SPLADE)"
               if "mlm_head" in model and not mlm else "")
            + (f"; the source's {', '.join(others)} are not used by fine-tuning"
               if others else ""))
        return {**params, "model": model}
    return init


def score_split(run: FineTuning, fn, params, split: Split):
    """(metrics, predictions) for one featurized split (metrics {} without gold labels)."""
    out = inference.predict(fn, params, split.arrays, run.config.train.batch_size,
                            run.trainer.shard)
    m, preds = run.task.score(out, split.examples, split.arrays, split.meta)
    return (m if run.task.has_gold(split.examples) else {}), preds


def _barrier(name: str) -> None:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def _save_best(run: FineTuning, params, row: dict) -> None:
    """best/ written beside as best.new/, then swapped in; best.json last (what resume reads).

    Every process takes part in the (collective) orbax save; process 0 alone moves
    folders and writes JSON. A kill at any point leaves a complete best/ or best.new/
    (`_recover_best`).
    """
    wd, primary = run.workdir, jax.process_index() == 0
    new, best, old = (os.path.join(wd, n) for n in ("best.new", "best", "best.old"))
    if primary:
        shutil.rmtree(new, ignore_errors=True)
    _barrier("best-clean")
    extra = {"labels.json": run.task.labels.names} if run.task.labels is not None else {}
    store.save_params(new, params, run.model_cfg, extra if primary else None, primary=primary)
    _barrier("best-saved")
    if primary:
        if os.path.exists(best):
            os.replace(best, old)
        os.replace(new, best)
        shutil.rmtree(old, ignore_errors=True)
        metrics_io.write_json(os.path.join(wd, "best.json"), row)
    _barrier("best-swapped")


def _recover_best(workdir: str) -> None:
    """After a kill mid-swap: a complete best.new/ or best.old/ stands in for a missing best/."""
    best = os.path.join(workdir, "best")
    for name in ("best.new", "best.old"):
        candidate = os.path.join(workdir, name)
        if not os.path.exists(best) and store.is_params_folder(candidate):
            os.replace(candidate, best)


@dataclasses.dataclass
class DevScore:
    """The end-of-epoch evaluator: dev/* metrics of the current parameters (with no dev
    file, none), the best epoch's parameters kept (`keep`: chosen by the task's primary dev
    metric, else minus the training loss; its row says "best"), and one JSON line per
    epoch on stdout: epoch, step, train loss, dev metrics, best."""
    run: FineTuning
    eval_state: Any           # jitted (params, batch) -> the task's outputs
    keep: evaluators.KeepBest
    name: str = "dev"

    @property
    def every(self) -> int:   # each epoch's end
        return self.run.steps_per_epoch

    def __call__(self, state, step: int, last: dict) -> dict:
        row = {"epoch": step // self.run.steps_per_epoch}
        score = -last.get("train/loss", math.nan)
        if "dev" in self.run.splits:
            m, _ = score_split(self.run, self.eval_state, state.params, self.run.splits["dev"])
            row.update({f"dev/{k}": v for k, v in m.items()})
            score = m.get(self.run.task.primary_metric, score)
        if self.keep(state, step, score, row):
            row["best"] = True
        print(json.dumps({"epoch": row["epoch"], "step": step,
                          "train/loss": last.get("train/loss", math.nan),
                          **{k: v for k, v in row.items() if k != "epoch"}}), flush=True)
        return row


# Fields a restart may change (logged); any other change is refused (train/workdir.py).
MUTABLE = ("train.num_epochs", "train.num_steps", "train.checkpoint_every",
           "train.keep_checkpoints", "train.progress", "data.test_file", "eval", "mesh",
           "distributed")


SOURCE = "source.json"  # WORKDIR/: the identity of the model the run started from


def check_source(workdir: str, init_from: str, primary: bool) -> None:
    """The model at init_from is the one this run started from (its step and content hash,
    encoder/eval/identity.py): a source trained on since is refused, not resumed from
    (the run's checkpoints and best/ would be the old model's, reported as the new one's).
    A new run records it."""
    if not init_from:
        return
    from encoder.eval import identity
    now = identity.source_identity(init_from)
    path = os.path.join(workdir, SOURCE)
    if store.has_checkpoint(workdir) and os.path.exists(path):
        with open(path) as f:
            then = json.load(f)
        if not identity.same_source(then, now):
            change = identity.changes({"source": then}, {"source": now})
            raise ValueError(f"init_from={init_from}: not the model this run in {workdir} "
                             f"started from ({'; '.join(change)}); fine-tune it into a new "
                             "--workdir (or remove this one to start again)")
    elif primary and not store.has_checkpoint(workdir):
        metrics_io.write_json(path, now)


def finetune(config, workdir: str, devices=None) -> dict:
    """Runs (or resumes) fine-tuning; returns {'dev': metrics, 'test': metrics}."""
    mesh = partitioning.make_mesh(config.mesh, devices)
    validate(config, mesh.devices.size)  # once, before the workdir is touched
    return skeleton.run(config, workdir, lambda c, w, d: experiment(c, w, mesh), MUTABLE,
                        devices, on_claim=lambda: check_source(workdir, config.init_from,
                                                               jax.process_index() == 0))


def experiment(config, workdir: str, mesh) -> experiment_lib.Experiment:
    """Fine-tuning as one Experiment: one segment of epochs, scored on dev at each epoch's
    end, the best epoch's parameters kept in best/."""
    run = build(config, workdir, mesh=mesh)
    cfg, trainer = run.config, run.trainer
    eval_state = jax.jit(lambda p, b: run.task.forward(run.model, run.effective(p), b),
                         in_shardings=(trainer.shardings.params, trainer.batch_sharding),
                         out_shardings=trainer.replicated)
    best: dict = {"score": -math.inf}
    keep_best = evaluators.KeepBest(
        lambda state, record: _save_best(run, run.effective(state.params), record), best,
        fields=("epoch",))
    opts = loop.LoopOptions(
        num_steps=run.total_steps, log_every=run.steps_per_epoch,
        checkpoint_every=cfg.train.checkpoint_every or run.steps_per_epoch,
        learning_rate=optimizer_lib.learning_rate_schedule(run.train_cfg),
        progress=cfg.train.progress, seed=cfg.seed)

    def batches(data_state, step, previous):
        it = pipeline.batch_iterator(run.train_source, cfg.train.batch_size, seed=cfg.seed,
                                     process_index=jax.process_index(),
                                     process_count=jax.process_count())
        if data_state is not None:
            it.set_state(data_state)
        return it

    bs = cfg.train.batch_size
    parts = experiment_lib.Parts(trainer_lib.Steps(trainer, run.loss_fn, None, bs, 1, bs),
                                 batches, [DevScore(run, eval_state, keep_best)], opts,
                                 {"task": cfg.task, "objective": "finetune"})
    return experiment_lib.Experiment(
        cfg, config, workdir, trainer,
        lambda mngr: trainer_lib.start_state(trainer, mngr, init_from_source(run)),
        (experiment_lib.Segment("main", 0, 0, run.total_steps, lambda: parts),),
        cfg.train.keep_checkpoints, begin=lambda start, writer: _begin(run, start, best),
        finish=lambda state, last: _finish(run, eval_state, state, last))


def _begin(run: FineTuning, start, best: dict) -> None:
    """The tokenizer and labels travel with the run (a valid init_from); a resumed run
    takes back its best epoch so far."""
    workdir, primary = run.workdir, jax.process_index() == 0
    if primary:
        run.source.tokenizer.save(os.path.join(workdir, "tokenizer"))
        origin.carry(run.config.init_from, workdir)  # the source's length, for its export
        if run.task.labels is not None:
            metrics_io.write_json(os.path.join(workdir, "labels.json"), run.task.labels.names)
    if start.step is not None and os.path.exists(os.path.join(workdir, "best.json")):
        if primary:
            _recover_best(workdir)
        with open(os.path.join(workdir, "best.json")) as f:
            best.update(json.load(f))
        best["score"] = -math.inf if best.get("score") is None else best["score"]


def _finish(run: FineTuning, eval_state, state, last: dict) -> dict:
    """The best epoch's parameters scored on dev and test: eval.json, predictions.jsonl."""
    if last.get("stopped"):
        return {"stopped": True, "step": int(state.step)}
    workdir = run.workdir
    _, best_params = store.load_params(os.path.join(workdir, "best"))
    # The best parameters in the state's layout, so the compiled dev function serves:
    # LoRA adapters are already merged into them, zero adapters add nothing.
    best_tree = {"model": best_params}
    if "lora" in state.params:
        best_tree["lora"] = jax.tree.map(np.zeros_like, jax.device_get(state.params["lora"]))
    best_tree = jax.device_put(best_tree, run.trainer.shardings.params)
    results, predictions = {}, []
    for name in ("dev", "test"):
        if name in run.splits:
            m, preds = score_split(run, eval_state, best_tree, run.splits[name])
            results[name] = m
            predictions += [{"split": name, "index": i, **p} for i, p in enumerate(preds)]
    if jax.process_index() == 0:
        metrics_io.write_json(os.path.join(workdir, "eval.json"), results)
        with open(os.path.join(workdir, "predictions.jsonl"), "w") as f:
            for p in predictions:
                f.write(json.dumps(p) + "\n")
    logging.info("fine-tuning done: %s", results)
    return results
