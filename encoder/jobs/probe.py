"""Per-layer linear probes: where does a frozen encoder keep what a task needs?

For every layer l = 0 (embeddings) .. L, the mean-pooled hidden states of the
task's inputs (pairs encoded jointly, as fine-tuning reads them) are the
features of a linear model fitted to convergence on the training split
(logistic regression for classification, ridge for regression; features
standardised on train), scored on dev. A control with shuffled training labels
(Hewitt & Liang 2019's selectivity idea, simplified) says how much a probe of
that size finds in any features. The result is a layer x task table (and a
heatmap), the classic tool for comparing a pretrained encoder with the same
architecture at random initialisation.

Each task type says how it is probed (its class's `probe`): "sentence" types as above,
"token" types (tagging) per token; a type with none is refused.

Tagging tasks are probed per token (Tenney et al. 2019, "BERT rediscovers the
classical NLP pipeline"; Hewitt & Manning 2019): the features of a word are the
hidden states of its first piece (the piece fine-tuning labels, through
tagging.featurize_tagging's alignment), a multinomial logistic regression on
standardised features is fitted to at most `max_tokens` training words (a
seeded draw), and dev is scored by entity F1 over BIO spans, the metric of the
fine-tuning job and the suite; the control shuffles the drawn words' tags.

    python -m encoder probe --init_from=WORKDIR|hf:DIR --tasks=DIR[,DIR...] --out=OUT \
        [--random_init] [--max_train=2000] [--max_tokens=20000]

Each task folder holds train.jsonl and dev.jsonl (classification, or
regression when every label is a number and task.json says {"type": "regression"},
or tagging with {"tokens", "tags"} rows and {"type": "tagging"}).
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from encoder.checkpoints import sources
from encoder.data import overlap
from encoder.eval import inference
from encoder.tasks import readers as tasks_lib
from encoder.tasks import table as tasks_table
from encoder.tasks import files as task_files
from encoder.tasks.files import LabelSet
from encoder.tasks.table import TASKS
from encoder.tasks.tagging import Tagging, featurize_tagging
from encoder.eval import metrics as metrics_lib
from encoder.model import models
from encoder.model.encoder import Encoder, encoder_params


def random_params(model_cfg, seed: int = 0) -> dict:
    """The same architecture with fresh weights: the control every pretraining claim needs."""
    import flax.linen as nn
    model = models.MaskedLM(models.freeze(model_cfg))
    ids = jnp.ones((1, 8), jnp.int32)
    return nn.unbox(jax.jit(lambda r: model.init(
        r, ids, ids * 0, ids, mlm_positions=jnp.zeros((1, 1), jnp.int32)))(
            jax.random.key(seed)))["params"]


def layer_features(model_cfg, params, tokenizer, examples, max_len: int = 128,
                   batch_size: int = 64) -> np.ndarray:
    """[L+1, N, D] mean-pooled hidden states of every layer (embeddings first)."""
    enc = Encoder(models.freeze(model_cfg))

    @jax.jit
    def pooled(p, b):  # -> [B, L+1, D] (batch-major, as inference.predict returns rows)
        mask = b["attention_mask"]
        _, aux = enc.apply({"params": p}, b["input_ids"], b["segment_ids"], mask,
                           return_all=True)
        hs = jnp.stack(aux["hidden_states"], axis=1)  # [B, L+1, T, D]
        w = mask[:, None, :, None].astype(jnp.float32)
        return (hs * w).sum(2) / jnp.maximum(w.sum(2), 1.0)

    texts = [ex.get("text", ex.get("text_a")) for ex in examples]
    arrays = inference.encode_texts(tokenizer, texts, max_len,
                                    [ex.get("text_b") for ex in examples])
    return np.moveaxis(inference.predict(pooled, encoder_params(params), arrays, batch_size),
                       0, 1)


def fit_predict(x_train, y_train, x_dev, numeric: bool = False) -> np.ndarray:
    """Dev predictions of a converged linear probe on features standardised on train
    (logistic regression, multinomial over >2 classes; ridge for numeric labels)."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.preprocessing import StandardScaler
    scale = StandardScaler().fit(x_train)
    a, b = scale.transform(x_train), scale.transform(x_dev)
    if numeric:
        return Ridge(alpha=1.0).fit(a, y_train).predict(b)
    return LogisticRegression(max_iter=5000).fit(a, y_train).predict(b)


def fit_and_score(x_train, y_train, x_dev, y_dev, numeric: bool = False) -> float:
    """Dev accuracy (classes) or Pearson r (numeric labels) of a converged linear probe."""
    pred = fit_predict(x_train, y_train, x_dev, numeric)
    if numeric:
        return float(np.corrcoef(pred, y_dev)[0, 1])
    return float(np.mean(pred == np.asarray(y_dev)))


def probe_task(model_cfg, params, tokenizer, train, dev, kind: str = tasks_table.DEFAULT,
               max_len: int = 128, seed: int = 0) -> dict:
    """{'layers': [score per layer], 'control': [score with shuffled train labels]}
    of a sentence-level type (kind: its name; numeric labels are regressed)."""
    numeric = tasks_table.lookup(kind).numeric_labels
    key = (lambda ex: float(ex["label"])) if numeric else (lambda ex: str(ex["label"]))
    y_train = np.array([key(ex) for ex in train])
    y_dev = np.array([key(ex) for ex in dev])
    shuffled = np.random.default_rng(seed).permutation(y_train)
    f_train = layer_features(model_cfg, params, tokenizer, train, max_len)
    f_dev = layer_features(model_cfg, params, tokenizer, dev, max_len)
    return {"layers": [fit_and_score(f_train[l], y_train, f_dev[l], y_dev, numeric)
                       for l in range(len(f_train))],
            "control": [fit_and_score(f_train[l], shuffled, f_dev[l], y_dev, numeric)
                        for l in range(len(f_train))]}


def layer_token_features(model_cfg, params, tokenizer, examples, max_len: int = 128,
                         batch_size: int = 64, max_words: int = 0,
                         rng=None) -> tuple[np.ndarray, list]:
    """([L+1, N, D] hidden states of each word's first piece, every layer with the
    embeddings first; the N (example, word) indices). Words are aligned to pieces by
    tagging.featurize_tagging, the fine-tuning featurizer; words past max_len have no
    piece and no row. max_words: a draw of at most that many words (rng; 0: every word)."""
    labels = LabelSet(Tagging.label_names(examples))  # only to featurize
    arrays, word_pos = featurize_tagging(examples, tokenizer, max_len, labels)
    rows = [(r, w) for r, first in enumerate(word_pos) for w, p in enumerate(first) if p >= 0]
    if max_words and len(rows) > max_words:
        rows = [rows[i] for i in np.sort(rng.choice(len(rows), max_words, replace=False))]
    width = max([len(first) for first in word_pos] + [1])  # W: one compiled shape
    pos = np.zeros((len(examples), width), np.int32)  # [N_ex, W]
    for r, first in enumerate(word_pos):
        pos[r, :len(first)] = np.maximum(first, 0)
    enc = Encoder(models.freeze(model_cfg))

    @jax.jit
    def gathered(p, b):  # -> [B, L+1, W, D]
        _, aux = enc.apply({"params": p}, b["input_ids"], b["segment_ids"], b["attention_mask"],
                           return_all=True)
        hs = jnp.stack(aux["hidden_states"], axis=1)  # [B, L+1, T, D]
        return jnp.take_along_axis(hs, b["at"][:, None, :, None], axis=2)

    by_example = {}
    for r, w in rows:
        by_example.setdefault(r, []).append(w)
    needed = sorted(by_example)  # only the examples that hold a wanted word
    out = []
    if needed:
        idx = np.asarray(needed)
        sub = {k: arrays[k][idx] for k in ("input_ids", "segment_ids", "attention_mask")}
        sub["at"] = pos[idx]
        hs = inference.predict(gathered, encoder_params(params), sub,
                               batch_size)  # [N_needed, L+1, W, D]
        out = [hs[b][:, by_example[r]] for b, r in enumerate(needed)]
    order = [(r, w) for r in needed for w in by_example[r]]
    dim = model_cfg.hidden_size
    feats = np.concatenate(out, axis=1) if out else np.zeros(
        (model_cfg.num_layers + 1, 0, dim), np.float32)
    return feats, order


def probe_tagging_task(model_cfg, params, tokenizer, train, dev, max_len: int = 128,
                       seed: int = 0, max_tokens: int = 20000) -> dict:
    """probe_task for tagging: {'layers': [dev entity F1 per layer], 'control': [...]}.

    Per layer, a multinomial logistic regression on the standardised first-piece features
    of at most max_tokens training words (seeded draw) predicts each dev word's tag;
    words past max_len are tagged O (as Tagging.score does); entity F1 over BIO spans
    (metrics.entity_f1) scores the dev tag sequences. The control fits the same words
    with their tags shuffled among them."""
    rng = np.random.default_rng(seed)
    f_train, order = layer_token_features(model_cfg, params, tokenizer, train, max_len,
                                          max_words=max_tokens, rng=rng)
    y_train = np.array([train[r]["tags"][w] for r, w in order])
    shuffled = rng.permutation(y_train)
    f_dev, dev_order = layer_token_features(model_cfg, params, tokenizer, dev, max_len)
    gold = [ex["tags"] for ex in dev]

    def score(pred) -> float:
        tags = [["O"] * len(ex["tags"]) for ex in dev]
        for (r, w), t in zip(dev_order, pred):
            tags[r][w] = str(t)
        return metrics_lib.entity_f1(gold, tags)["entity_f1"]

    return {"layers": [score(fit_predict(f_train[l], y_train, f_dev[l]))
                       for l in range(len(f_train))],
            "control": [score(fit_predict(f_train[l], shuffled, f_dev[l]))
                        for l in range(len(f_train))]}


def probe_examples(model_cfg, params, tokenizer, train, dev, kind: str, max_len: int = 128,
                   seed: int = 0, max_tokens: int = 20000) -> dict:
    """probe_task or probe_tagging_task, as the type's `probe` says."""
    if tasks_table.lookup(kind).probe == "token":
        return probe_tagging_task(model_cfg, params, tokenizer, train, dev, max_len, seed,
                                  max_tokens)
    return probe_task(model_cfg, params, tokenizer, train, dev, kind, max_len, seed)


def probed(kind: str) -> bool:
    """Whether a task type has a probe."""
    return kind in TASKS and bool(TASKS[kind].probe)


def read_task(folder: str, max_train: int = 0, seed: int = 0,
              max_overlap: float = overlap.MAX_SHARE):
    """(train, dev, kind) from a task folder; train subsampled to max_train examples (0: all)."""
    kind = tasks_table.DEFAULT
    meta = os.path.join(folder, "task.json")
    if os.path.exists(meta):
        with open(meta) as f:
            kind = json.load(f).get("type", kind)
    if not probed(kind):
        names = tasks_table.having("probe")
        raise ValueError(f"{folder}: probes take {', '.join(names[:-1])} or {names[-1]} tasks, "
                         f"not {kind!r}")
    train = tasks_lib.read_jsonl(os.path.join(folder, "train.jsonl"), kind)
    dev = tasks_lib.read_jsonl(os.path.join(folder, "dev.jsonl"), kind)
    for split, examples in (("train", train), ("dev", dev)):
        if TASKS[kind].probe == "token":
            continue  # read_jsonl required tokens and tags of equal length
        missing = [ex["_where"] for ex in examples if "label" not in ex]
        if missing:
            raise tasks_lib.TaskDataError(f"{missing[0]}: no 'label' field ({split} needs one)")
    if TASKS[kind].probe != "token" and not tasks_table.lookup(kind).numeric_labels:
        # a dev label no training row has is scored 0 by any probe: refused as fine-tuning
        # refuses it, before a layer table that would read as "nothing is decodable"
        seen = LabelSet(sorted({str(ex["label"]) for ex in train}))
        for ex in dev:
            seen.index(str(ex["label"]), ex["_where"])
    # held out by content, as fine-tuning, `baselines` and the suite hold it (data/overlap.py)
    for line in task_files.refuse_training_rows(
            train, os.path.join(folder, "train.jsonl"),
            {"dev": (os.path.join(folder, "dev.jsonl"), dev)}, max_overlap,
            "--max_held_out_overlap"):
        overlap.say(line)
    if max_train and len(train) > max_train:
        idx = np.random.default_rng(seed).choice(len(train), max_train, replace=False)
        train = [train[i] for i in sorted(idx)]
    return train, dev, kind


def heatmap(table: dict, path: str) -> None:
    """A layer x task heatmap of probe scores (rows: tasks, columns: layers)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted(table)
    grid = np.array([table[n]["layers"] for n in names])
    fig, ax = plt.subplots(figsize=(1.2 + 0.8 * grid.shape[1], 0.8 + 0.5 * len(names)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis")
    ax.set_xticks(range(grid.shape[1]), [f"{'emb' if l == 0 else l}" for l in
                                         range(grid.shape[1])])
    ax.set_yticks(range(len(names)), names)
    for (r, c), v in np.ndenumerate(grid):
        ax.text(c, r, f"{v:.2f}", ha="center", va="center", color="white", fontsize=8)
    ax.set_xlabel("layer")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def probe(init_from: str, tasks, out: str, random_init: bool = False, max_train: int = 2000,
          max_tokens: int = 20000, max_len: int = 128, seed: int = 0,
          max_overlap: float = overlap.MAX_SHARE) -> dict:
    """Per-layer probes of the model at init_from on each task folder; writes
    out/probes.json and out/probes.png and returns the scores."""
    from encoder import errors
    try:  # the length the model's positions allow, up front (fine-tuning's own check)
        models.validate_config(sources.model_config(init_from), max_len)
    except ValueError as e:
        if "seq_len" not in str(e):
            raise
        raise errors.UsageError(f"--max_len={max_len}: {e}; give --max_len at most "
                                "model.max_position") from None
    errors.check_output(out, "probe", "--out")  # never a user's folder or a run's workdir
    src = sources.load(init_from)
    params = random_params(src.model_cfg, seed) if random_init else src.params
    scores = {}
    for folder in tasks:
        train, dev, kind = read_task(folder, max_train, seed, max_overlap)
        name = os.path.basename(os.path.normpath(folder))
        scores[name] = probe_examples(src.model_cfg, params, src.tokenizer, train, dev, kind,
                                      max_len, seed, max_tokens)
        print(f"{name}: layers {[round(x, 3) for x in scores[name]['layers']]} "
              f"(control {[round(x, 3) for x in scores[name]['control']]})", flush=True)
    errors.mark_output(out, "probe")
    from encoder.train import metrics_io
    metrics_io.write_json(os.path.join(out, "probes.json"), scores)
    heatmap(scores, os.path.join(out, "probes.png"))
    return scores
