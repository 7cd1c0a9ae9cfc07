"""Fine-tuning: a pretrained encoder plus a typed head, trained on a task file.

    python -m encoder.main --config=experiments/finetune.py:task=classification \\
        --config.init_from=CKPT --config.data.train_file=... --config.data.dev_file=... \\
        [--config.data.test_file=...] --workdir=DIR

CKPT is a pretraining workdir of this codebase (its tokenizer comes along) or
hf:DIR for a HuggingFace BERT folder (with its WordPiece vocabulary). The MLM
head is dropped and the task's head attached (TASKS). Training modes:
`full`, `frozen` (a linear probe: only the head learns) and `lora` (low-rank
adapters on the attention and MLP projections, Hu et al. 2021, merged into
the frozen kernels inside the step). `layer_decay` < 1 scales layer l's
learning rate by decay^(L - l) (ELECTRA's layer-wise decay). Dev is evaluated
every epoch; the best epoch's parameters are kept, and DIR/eval.json and
DIR/predictions.jsonl are written from them.
"""
import dataclasses
import json
import math
import os
import re
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from encoder import registry
from encoder.data import tasks as tasks_lib, tokenizer as tokenizer_lib
from encoder.eval import metrics as metrics_lib
from encoder.model import heads, models
from encoder.model.encoder import encoder_params
from encoder.train import finetune_defaults, optimizer as optimizer_lib, partitioning

MODES = ("full", "frozen", "lora")


# ----------------------------------------------------------------------------- losses

def classification_loss(out, batch):
    logp = jax.nn.log_softmax(out)
    nll = -jnp.take_along_axis(logp, batch["labels"][:, None], -1)[:, 0]
    return jnp.sum(nll * batch["weight"]) / jnp.maximum(jnp.sum(batch["weight"]), 1.0)


def regression_loss(out, batch):
    err = (out[:, 0] - batch["labels"]) ** 2
    return jnp.sum(err * batch["weight"]) / jnp.maximum(jnp.sum(batch["weight"]), 1.0)


def tagging_loss(out, batch):
    labels = batch["labels"]
    valid = (labels != tasks_lib.IGNORE) & (batch["weight"][:, None] > 0)
    logp = jax.nn.log_softmax(out)
    nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], -1)[..., 0]
    return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1)


def _masked_logits(logits, allowed):
    return jnp.where(allowed, logits, -1e9)


def span_loss(out, batch):
    start, end = out
    allowed = batch["context_mask"].astype(bool).at[:, 0].set(True)  # [CLS] = no answer here
    w = batch["weight"]
    total = 0.0
    for logits, target in ((start, batch["start_positions"]), (end, batch["end_positions"])):
        logp = jax.nn.log_softmax(_masked_logits(logits, allowed))
        nll = -jnp.take_along_axis(logp, target[:, None], -1)[:, 0]
        total = total + jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)
    return total / 2


def contrastive_loss(out, batch, scale: float = 20.0):
    """Multiple-negatives ranking (Henderson et al. 2017; Sentence-BERT): in-batch softmax."""
    a, b = out
    scores = scale * a @ b.T  # [B, B] cosine similarities (vectors are normalised)
    w = batch["weight"]
    scores = jnp.where(w[None, :] > 0, scores, -1e9)
    logp = jax.nn.log_softmax(scores, axis=-1)
    return -jnp.sum(jnp.diagonal(logp) * w) / jnp.maximum(jnp.sum(w), 1.0)


# ----------------------------------------------------------------------------- tasks

@dataclasses.dataclass(frozen=True)
class Task:
    model: Callable            # (cfg, num_labels, pooling) -> nn.Module
    loss: Callable             # (model output, batch) -> scalar
    primary_metric: str
    has_labels: bool = True


TASKS: dict[str, Task] = {
    "classification": Task(models.SequenceClassifier, classification_loss, "accuracy"),
    "regression": Task(models.SequenceClassifier, regression_loss, "pearson"),
    "tagging": Task(models.TokenClassifier, tagging_loss, "entity_f1"),
    "qa": Task(models.SpanExtractor, span_loss, "f1"),
    "contrastive": Task(models.Embedder, contrastive_loss, "recall_at_1", has_labels=False),
}


# ----------------------------------------------------------------------------- loading

def load_pretrained(init_from: str, config):
    """(model config, encoder params or None, extra params, tokenizer)."""
    if init_from:
        from encoder.train import pretrained
        p = pretrained.load(init_from)
        extra = {"pooler": p.params["pooler"]} if "pooler" in p.params else {}
        return p.model_cfg, encoder_params(p.params), extra, p.tokenizer
    if not config.data.tokenizer:
        raise ValueError("training from scratch (no init_from) needs data.tokenizer")
    tok = tokenizer_lib.load(config.data.tokenizer)
    cfg = config.model
    cfg.vocab_size = tok.vocab_size
    return cfg, None, {}, tok


# ----------------------------------------------------------------------------- optimizer

def layer_of(path: tuple[str, ...], num_layers: int) -> int:
    """0 for embeddings, l+1 for block l, num_layers+1 for the head (and anything else)."""
    names = "/".join(path)
    m = re.search(r"blocks_(\d+)", names)
    if m:
        return int(m.group(1)) + 1
    if "shared_block" in names:
        return num_layers
    if "/embed" in names:  # the tables, their norm and the E -> D projection
        return 0
    return num_layers + 1


def lr_multipliers(params, num_layers: int, decay: float):
    """decay^(L + 1 - layer): the head keeps the full rate, embeddings the least."""
    def mult(path, _):
        keys = tuple(getattr(p, "key", str(p)) for p in path)
        if keys[0] != "model":
            return 1.0
        return decay ** (num_layers + 1 - layer_of(keys[1:], num_layers))
    return jax.tree_util.tree_map_with_path(mult, params)


def trainable_labels(params, mode: str):
    """'train' or 'freeze' per leaf: frozen/lora modes train only the head (and adapters)."""
    def label(path, _):
        keys = tuple(getattr(p, "key", str(p)) for p in path)
        if mode == "full" or keys[0] == "lora" or (len(keys) > 1 and keys[1] == "head"):
            return "train"
        return "freeze"
    return jax.tree_util.tree_map_with_path(label, params)


def make_optimizer(config, params, num_layers: int, total_steps: int):
    t = config.train.copy_and_resolve_references()
    t.num_steps = total_steps
    t.warmup_steps = int(config.finetune.warmup_fraction * total_steps)
    adamw = optimizer_lib.make_optimizer(t)
    if config.finetune.layer_decay < 1.0:
        mults = lr_multipliers(params, num_layers, config.finetune.layer_decay)
        adamw = optax.chain(adamw, optax.stateless(
            lambda updates, _: jax.tree.map(lambda u, m: u * m, updates, mults)))
    return optax.multi_transform({"train": adamw, "freeze": optax.set_to_zero()},
                                 trainable_labels(params, config.finetune.mode))


# ----------------------------------------------------------------------------- LoRA

LORA_TARGETS = ("attention/qkv/kernel", "attention/out/kernel", "mlp/wi/kernel", "mlp/wo/kernel")
_IN_AXES = {"attention/qkv/kernel": 1, "attention/out/kernel": 2, "mlp/wi/kernel": 1,
            "mlp/wo/kernel": 1}


def _flat(tree, prefix=""):
    for k, v in tree.items():
        path = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            yield from _flat(v, path)
        else:
            yield path, v


def init_lora(rng, encoder_tree, rank: int):
    """{'path': {'a': [in, r], 'b': [r, out]}} for every targeted kernel; b starts at 0."""
    lora = {}
    for path, w in _flat(encoder_tree):
        target = next((t for t in LORA_TARGETS if path.endswith(t)), None)
        if target is None:
            continue
        n_in = int(np.prod(w.shape[:_IN_AXES[target]]))
        n_out = int(np.prod(w.shape[_IN_AXES[target]:]))
        rng, key = jax.random.split(rng)
        lora[path] = {"a": jax.random.normal(key, (n_in, rank)) / math.sqrt(n_in),
                      "b": jnp.zeros((rank, n_out))}
    if not lora:
        raise ValueError("LoRA found no attention/MLP kernel to adapt")
    return lora


def merge_lora(model_params, lora, scale: float):
    """W + scale * A B for every adapted kernel (a pure function of both trees)."""
    def merge(tree, prefix=""):
        out = {}
        for k, v in tree.items():
            path = f"{prefix}/{k}" if prefix else k
            if isinstance(v, dict):
                out[k] = merge(v, path)
            elif path in lora:
                delta = lora[path]["a"] @ lora[path]["b"]
                out[k] = v + scale * delta.reshape(v.shape).astype(v.dtype)
            else:
                out[k] = v
        return out
    return merge(model_params)


# ----------------------------------------------------------------------------- data

def featurize(task: str, examples, tok, config, labels):
    max_len = config.data.max_seq_len
    if task in ("classification", "regression"):
        return tasks_lib.featurize_sequences(examples, tok, max_len, task, labels), None
    if task == "tagging":
        return tasks_lib.featurize_tagging(examples, tok, max_len, labels)
    if task == "qa":
        return tasks_lib.featurize_qa(examples, tok, max_len, config.data.doc_stride)
    if task == "contrastive":
        return tasks_lib.featurize_pairs(examples, tok, max_len), None
    raise ValueError(f"Unknown task {task!r}; valid names: {', '.join(TASKS)}")


def batches(arrays: dict, batch_size: int, rng: np.random.Generator | None = None):
    """Yields batches with a `weight` column; the last partial batch is padded (weight 0)."""
    n = len(next(iter(arrays.values())))
    order = rng.permutation(n) if rng is not None else np.arange(n)
    for i in range(0, n, batch_size):
        idx = order[i:i + batch_size]
        pad = batch_size - len(idx)
        take = np.concatenate([idx, np.repeat(idx[:1], pad)]) if pad else idx
        batch = {k: v[take] for k, v in arrays.items()}
        batch["weight"] = np.concatenate([np.ones(len(idx)), np.zeros(pad)]).astype(np.float32)
        yield batch


# ----------------------------------------------------------------------------- the run

class FineTuner:
    """Holds the model, its parameters and the jitted train / predict functions."""

    def __init__(self, config, devices=None):
        self.config = config
        self.task = registry.lookup(TASKS, config.task, "task")
        registry.lookup(dict.fromkeys(MODES), config.finetune.mode, "fine-tuning mode")
        registry.lookup(heads.POOLING, config.pooling, "pooling rule")
        self.mesh = partitioning.make_mesh(config.mesh, devices)
        self.model_cfg, self.pretrained, self.extra, self.tokenizer = load_pretrained(
            config.init_from, config)
        # One compiled forward for every dev/test evaluation (a fresh lambda per call
        # would recompile at every epoch).
        self.predict_fn = jax.jit(lambda t, b: self.forward(t, b, deterministic=True))
        if config.finetune.random_init:  # the same architecture and tokenizer, fresh weights
            self.pretrained, self.extra = None, {}
        self.model_cfg = self.model_cfg.copy_and_resolve_references()
        self.config = config = config.copy_and_resolve_references()
        finetune_defaults.resolve(config, self.model_cfg.hidden_size, self.model_cfg.num_layers)
        self.model_cfg.dropout = config.finetune.dropout
        self.model_cfg.attention_dropout = config.finetune.dropout
        if config.data.max_seq_len > self.model_cfg.max_position and \
                self.model_cfg.position in ("learned", "sinusoidal"):
            raise ValueError(f"data.max_seq_len {config.data.max_seq_len} exceeds the model's "
                             f"{self.model_cfg.max_position} positions")

    def build(self, num_labels: int):
        cfg = models.freeze(self.model_cfg)
        self.model = self.task.model(cfg, num_labels, self.config.pooling)
        ids = jnp.ones((1, 8), jnp.int32)
        params = nn.unbox(self.model.init(jax.random.key(self.config.seed), ids, ids * 0, ids)
                          )["params"]
        if self.pretrained is not None:
            params["encoder"] = jax.tree.map(lambda new, old: jnp.asarray(old, new.dtype),
                                             params["encoder"], _prune_like(self.pretrained,
                                                                            params["encoder"]))
        if "pooler" in self.extra and "pooler" in params.get("head", {}):
            params["head"]["pooler"] = jax.tree.map(jnp.asarray, self.extra["pooler"])
        tree = {"model": params}
        if self.config.finetune.mode == "lora":
            tree["lora"] = init_lora(jax.random.key(self.config.seed + 1), params["encoder"],
                                     self.config.finetune.lora_rank)
        return tree

    def effective(self, tree):
        if "lora" in tree:
            f = self.config.finetune
            model = dict(tree["model"])
            model["encoder"] = merge_lora(model["encoder"], tree["lora"], f.lora_alpha / f.lora_rank)
            return model
        return tree["model"]

    def forward(self, tree, batch, deterministic, rng=None):
        params = self.effective(tree)
        kw = dict(deterministic=deterministic, rngs={"dropout": rng} if rng is not None else {})
        if self.config.task == "contrastive":
            a, _ = self.model.apply({"params": params}, batch["a_input_ids"], batch["a_segment_ids"],
                                    batch["a_attention_mask"], **kw)
            b, _ = self.model.apply({"params": params}, batch["b_input_ids"], batch["b_segment_ids"],
                                    batch["b_attention_mask"], **kw)
            return a, b
        out, _ = self.model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                                  batch["attention_mask"], **kw)
        return out


def _prune_like(loaded, target):
    """The loaded subtree restricted to target's keys (e.g. drops an MLM-only piece)."""
    if not isinstance(target, dict):
        if tuple(np.shape(loaded)) != tuple(target.shape):
            raise ValueError(f"pretrained shape {np.shape(loaded)} != model shape {target.shape}")
        return loaded
    missing = [k for k in target if k not in loaded]
    if missing:
        raise ValueError(f"pretrained encoder lacks {missing}")
    return {k: _prune_like(loaded[k], v) for k, v in target.items()}


def _shard(batch, mesh):
    return partitioning.shard_batch(batch, mesh)


def predict(ft: FineTuner, tree, arrays, batch_size: int):
    """Raw model outputs for every row (numpy), in order."""
    fn = ft.predict_fn
    outs = []
    n = len(next(iter(arrays.values())))
    for batch in batches(arrays, batch_size):
        keep = int(batch.pop("weight").sum())
        out = jax.device_get(fn(tree, _shard(batch, ft.mesh)))
        outs.append(jax.tree.map(lambda x: np.asarray(x)[:keep], out))
    out = jax.tree.map(lambda *xs: np.concatenate(xs), *outs)
    assert len(jax.tree.leaves(out)[0]) == n
    return out


def evaluate_split(ft: FineTuner, tree, examples, arrays, meta, labels, batch_size: int):
    """(metrics, predictions) for one featurized split."""
    task, cfg = ft.config.task, ft.config
    out = predict(ft, tree, arrays, batch_size)
    has_gold = all("label" in ex for ex in examples) or task in ("tagging", "qa", "contrastive")
    if task == "classification":
        pred = np.argmax(out, -1)
        preds = [{"label": labels.names[p]} for p in pred]
        m = metrics_lib.classification_metrics(arrays["labels"], pred) if "labels" in arrays else {}
    elif task == "regression":
        preds = [{"label": float(v)} for v in out[:, 0]]
        m = metrics_lib.regression_metrics(arrays["labels"], out[:, 0]) if "labels" in arrays \
            else {}
    elif task == "tagging":
        pred = np.argmax(out, -1)
        preds, gold = [], []
        for r, ex in enumerate(examples):
            tags = [labels.names[pred[r, p]] if p >= 0 else "O" for p in meta[r]]
            preds.append({"tags": tags})
            gold.append(ex["tags"])
        m = metrics_lib.entity_f1(gold, [p["tags"] for p in preds])
    elif task == "qa":
        start, end = out
        s, e, score = heads.best_span(jnp.asarray(start), jnp.asarray(end),
                                      jnp.asarray(arrays["context_mask"].astype(bool)),
                                      cfg.data.max_answer_tokens)
        s, e, score = np.asarray(s), np.asarray(e), np.asarray(score)
        best: dict[int, tuple[float, str]] = {}
        for w, info in enumerate(meta):
            text = tasks_lib.qa_answer_text(examples[info["example"]], info, int(s[w]), int(e[w]))
            if info["example"] not in best or score[w] > best[info["example"]][0]:
                best[info["example"]] = (float(score[w]), text)
        answers = [best.get(i, (0.0, ""))[1] for i in range(len(examples))]
        preds = [{"id": ex.get("id"), "answer": a} for ex, a in zip(examples, answers)]
        golds = [ex.get("answers") or [ex["answer_text"]] for ex in examples]
        m = metrics_lib.squad_scores(answers, golds)
    else:  # contrastive: retrieve each text_b among all of the split's text_b
        a, b = out
        sims = a @ b.T
        nearest = np.argmax(sims, axis=1)
        preds = [{"nearest": int(j)} for j in nearest]
        m = {"recall_at_1": float(np.mean(nearest == np.arange(len(a))))}
    if not has_gold:
        m = {}
    return m, preds


def finetune(config, workdir: str, devices=None) -> dict:
    """Runs fine-tuning; returns {'dev': metrics, 'test': metrics}."""
    os.makedirs(workdir, exist_ok=True)
    ft = FineTuner(config, devices)
    config = ft.config  # with the size-dependent defaults filled in
    task = config.task
    train_ex = tasks_lib.read_examples(config.data.train_file, task)
    labels = (tasks_lib.LabelSet.from_examples(train_ex, task)
              if task in ("classification", "tagging") else None)
    num_labels = {"classification": len(labels.names) if labels else 0, "regression": 1,
                  "tagging": len(labels.names) if labels else 0, "qa": 2, "contrastive": 0}[task]
    splits = {"train": (train_ex, *featurize(task, train_ex, ft.tokenizer, config, labels))}
    for name in ("dev", "test"):
        path = config.data[f"{name}_file"]
        if path:
            ex = tasks_lib.read_examples(path, task)
            splits[name] = (ex, *featurize(task, ex, ft.tokenizer, config, labels))
    tree = ft.build(num_labels)
    bs = config.train.batch_size
    n_train = len(next(iter(splits["train"][1].values())))
    steps_per_epoch = max(1, n_train // bs)
    total = steps_per_epoch * config.train.num_epochs
    tx = make_optimizer(config, tree, ft.model_cfg.num_layers, total)
    opt_state = tx.init(tree)

    @jax.jit
    def train_step(tree, opt_state, batch, rng):
        loss, grads = jax.value_and_grad(
            lambda t: ft.task.loss(ft.forward(t, batch, deterministic=False, rng=rng), batch))(tree)
        updates, opt_state = tx.update(grads, opt_state, tree)
        return optax.apply_updates(tree, updates), opt_state, loss

    rng = np.random.default_rng(config.seed)
    key = jax.random.key(config.seed)
    best_score, best_tree, history = -math.inf, tree, []
    train_arrays = splits["train"][1]
    dev = splits.get("dev")
    step = 0
    for epoch in range(1, config.train.num_epochs + 1):
        losses = []
        for batch in batches(train_arrays, bs, rng):
            if batch["weight"].sum() < bs:
                continue  # keep every step's batch full (the shuffle changes each epoch)
            tree, opt_state, loss = train_step(tree, opt_state, _shard(batch, ft.mesh),
                                               jax.random.fold_in(key, step))
            losses.append(loss)
            step += 1
        train_loss = float(np.mean(jax.device_get(losses))) if losses else float("nan")
        row = {"epoch": epoch, "step": step, "train/loss": train_loss}
        if dev is not None:
            m, _ = evaluate_split(ft, tree, dev[0], dev[1], dev[2], labels, bs)
            row.update({f"dev/{k}": v for k, v in m.items()})
            score = m.get(ft.task.primary_metric, -train_loss)
        else:
            score = -train_loss
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"non-finite training loss at epoch {epoch}")
        if score > best_score:
            best_score, best_tree = score, jax.tree.map(lambda x: x, tree)
            row["best"] = True
        history.append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")

    results, predictions = {}, []
    for name in ("dev", "test"):
        if name in splits:
            ex, arrays, meta = splits[name]
            m, preds = evaluate_split(ft, best_tree, ex, arrays, meta, labels, bs)
            results[name] = m
            predictions += [{"split": name, "index": i, **p} for i, p in enumerate(preds)]
    with open(os.path.join(workdir, "eval.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(workdir, "predictions.jsonl"), "w") as f:
        for p in predictions:
            f.write(json.dumps(p) + "\n")
    from encoder.train import checkpoint
    checkpoint.save_params(os.path.join(workdir, "best"), jax.device_get(ft.effective(best_tree)),
                           ft.model_cfg)
    logging.info("fine-tuning done: %s", results)
    return results
