"""Token tagging (NER, chunks): a label per word on its first piece, entity F1 (BIO).

Examples: {"tokens": [...], "tags": [...]}, one BIO tag per word (O, B-TYPE, I-TYPE; any
other tag is refused at reading, naming file:line: entity F1 would count it as no entity;
per-word tags such as POS are written B-TAG, each word its own entity). The label sits on each
word's first piece, other pieces get IGNORE; the per-token probe (encoder/jobs/probe.py)
reads the same alignment. Baselines: each word's most frequent training tag (`bow`),
the most frequent tag (`majority`).
"""
import collections
import re

import jax.numpy as jnp
import numpy as np

from encoder.eval import metrics as metrics_lib
from encoder.model import models
from encoder.tasks import files
from encoder.tasks.base import (IGNORE, Baseline, Export, LabelSet, Task, TaskDataError,
                                softmax_nll)

OUTSIDE = "O"  # BIO's outside tag: a word with no prediction (truncated, unseen) gets it
# The tags entity F1 reads (encoder/eval/metrics.py bio_entities): O, B and I (a type after
# a dash, or none: one entity type).
BIO = re.compile(r"O|[BI](-.+)?", re.DOTALL)


def featurize_tagging(examples, tokenizer, max_len: int, labels: LabelSet):
    """Word-level tags onto pieces: first piece labelled, the rest IGNORE."""
    n = len(examples)
    ids = np.full((n, max_len), tokenizer.pad_id, np.int32)
    tags = np.full((n, max_len), IGNORE, np.int32)
    mask = np.zeros((n, max_len), np.int32)
    word_pos = []  # per example: piece index of each word's first piece (-1 if truncated)
    for r, ex in enumerate(examples):
        pieces, first = [tokenizer.cls_id], []
        row_tags = [IGNORE]
        full = False  # truncation keeps a prefix: after the first word that does not fit, none
        for word, tag in zip(ex["tokens"], ex["tags"]):
            wp = tokenizer.encode(word) or [tokenizer.unk_id]
            full = full or len(pieces) + len(wp) > max_len - 1
            if full:
                first.append(-1)
                continue
            first.append(len(pieces))
            row_tags += [labels.index(tag, ex["_where"])] + [IGNORE] * (len(wp) - 1)
            pieces += wp
        pieces.append(tokenizer.sep_id)
        row_tags.append(IGNORE)
        ids[r, :len(pieces)] = pieces
        tags[r, :len(pieces)] = row_tags
        mask[r, :len(pieces)] = 1
        word_pos.append(first)
    return {"input_ids": ids, "segment_ids": np.zeros_like(ids), "attention_mask": mask,
            "labels": tags}, word_pos


# ------------------------------------------------------------------ baselines

def tag_by_word(train, splits) -> list:
    """Each word's most frequent training tag; unseen words OUTSIDE."""
    counts: dict = collections.defaultdict(collections.Counter)
    for ex in train:
        for word, tag in zip(ex["tokens"], ex["tags"]):
            counts[word][tag] += 1
    best = {w: c.most_common(1)[0][0] for w, c in counts.items()}  # ties: first seen
    return [[{"tags": [best.get(w, OUTSIDE) for w in ex["tokens"]]} for ex in s] for s in splits]


def majority_tag(train, splits) -> list:
    top = collections.Counter(t for ex in train for t in ex["tags"]).most_common(1)[0][0]
    return [[{"tags": [top] * len(ex["tokens"])} for ex in s] for s in splits]


class Tagging(Task):
    name = "tagging"
    primary_metric = "entity_f1"
    model_cls = models.TokenClassifier
    uses_labels = True
    fields = (("tokens", "tags"),)
    metric_keys = ("entity_f1", "entity_precision", "entity_recall")
    default_metrics = ("entity_f1",)
    baselines = {
        "bow": Baseline(tag_by_word, "each word's most frequent training tag (unseen words: O)"),
        "majority": Baseline(majority_tag, "the most frequent training tag"),
    }
    export = Export("token")
    probe = "token"
    label_fields = (("labels", ("T",), "int32"),)

    @classmethod
    def check_line(cls, example, where):
        for key in ("tokens", "tags"):
            value = example[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TaskDataError(f"{where}: {key!r} must be a list of strings, "
                                    f"got {files.json_kind(value)}")
        if len(example["tokens"]) != len(example["tags"]):
            raise TaskDataError(f"{where}: {len(example['tokens'])} tokens but "
                                f"{len(example['tags'])} tags")
        for i, tag in enumerate(example["tags"]):
            if not BIO.fullmatch(tag):
                raise TaskDataError(
                    f"{where}: tag {tag!r} (word {i + 1}, {example['tokens'][i]!r}) is not a "
                    "BIO tag (O, B-TYPE or I-TYPE): tagging is scored by entity F1 over BIO "
                    "spans, where any other tag is no entity; write spans as B-/I- tags (a "
                    "tag per word, as POS, as B-TAG)")

    @classmethod
    def label_names(cls, examples):
        return sorted({t for ex in examples for t in ex["tags"]})

    @classmethod
    def labels_of(cls, example):
        return list(example["tags"])

    def featurize(self, examples):
        return featurize_tagging(examples, self.tokenizer, self.config.data.max_seq_len,
                                 self.labels)

    def loss(self, out, batch):
        labels = batch["labels"]
        valid = (labels != IGNORE) & (batch["weight"][:, None] > 0)
        nll = softmax_nll(out, jnp.maximum(labels, 0))
        return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1)

    def score(self, out, examples, arrays, meta):
        pred = np.argmax(out, -1)
        preds, gold = [], []
        for r, ex in enumerate(examples):
            tags = [self.labels.names[pred[r, p]] if p >= 0 else OUTSIDE for p in meta[r]]
            preds.append({"tags": tags})
            gold.append(ex["tags"])
        return metrics_lib.entity_f1(gold, [p["tags"] for p in preds]), preds

    @classmethod
    def score_predictions(cls, examples, preds):
        return metrics_lib.entity_f1([ex["tags"] for ex in examples], [p["tags"] for p in preds])
