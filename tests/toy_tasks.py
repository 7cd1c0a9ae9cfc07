"""Toy tasks of every type, small enough that each baseline's score is worked out by hand
(tests/tasks/test_baselines.py, tests/e2e/test_baselines_runs.py), and tagging data whose
tags the word alone decides (the token probes: tests/jobs/test_probe_tagging.py).
"""
import csv
import json
import os

import numpy as np

from helpers import topic_task, write_jsonl

TAG_TRAIN = [  # "path": B-ARG twice, O once -> B-ARG; "mode": B-ARG then O (a tie: first seen)
    {"tokens": ["the", "path", "is", "a", "path"], "tags": ["O", "B-ARG", "O", "O", "B-ARG"]},
    {"tokens": ["path", "mode", "mode"], "tags": ["O", "B-ARG", "O"]},
    {"tokens": ["the", "name", "of", "it"], "tags": ["O", "B-ARG", "I-ARG", "O"]},
]
TAG_DEV = [  # gold entities (1,1) (3,3) (5,6); predicted O B B O B I -> (1,1) (2,2) (4,5)
    {"tokens": ["the", "path", "mode", "zebra", "name", "of", "it"],
     "tags": ["O", "B-ARG", "O", "B-ARG", "O", "B-ARG", "I-ARG"]},
]

QA_TRAIN = [{"question": "When was it built?", "context": "It was built in 1889.",
             "answer_text": "1889", "answer_start": 16},
            {"question": "Open a file and return a stream.",
             "context": "open: Open a file and return a stream.\nclose: Flush and close the "
                        "stream.", "answer_text": "open", "answer_start": 0}]
QA_DEV = [
    # the second line wins; aligned with the question, "close" is what is left: exact
    {"question": "Flush and close the stream.",
     "context": "open: Open a file and return a stream.\nclose: Flush and close the stream.",
     "answer_text": "close", "answer_start": 39},
    # the second sentence wins (was, built, it); left over: "was" (between two aligned
    # words) and "in 1889" (the longest run) -> "in 1889": EM 0, F1 2 * (1/2 * 1) / 1.5 = 2/3
    {"question": "When was it built?",
     "context": "The tower is tall. It was built in 1889.",
     "answer_text": "1889", "answer_start": 35},
]

STS_PAIRS = [  # cosines 1, strictly between 0 and 1, 0: gold ranks 1, 3, 2 -> Spearman -0.5
    {"text_a": "parse json text", "text_b": "parse json text", "label": 1.0},
    {"text_a": "read the socket", "text_b": "read the file", "label": 5.0},
    {"text_a": "thread lock", "text_b": "compress bytes", "label": 3.0},
]

CORPUS = [{"_id": "d1", "title": "", "text": "write text to a file"},
          {"_id": "d2", "title": "json", "text": "parse json text into objects"},
          {"_id": "d3", "title": "", "text": "parse the command line"}]
QUERIES = [{"_id": "q1", "text": "parse json text"},  # d2 shares every word: first
           {"_id": "q2", "text": "zebra"}]            # no word in the corpus: d3 comes last
QRELS = "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td3\t1\n"
# q1: rank 1; q2: rank 3 of 3 (ties kept in corpus order) -> nDCG@10 (1 + 1/log2(4)) / 2,
# MRR@10 (1 + 1/3) / 2, recall@1 1/2, recall@10 1, MAP (1 + 1/3) / 2 (one relevant each).
RETRIEVAL = {"ndcg_at_10": 0.75, "mrr_at_10": 2 / 3, "recall_at_1": 0.5, "recall_at_10": 1.0,
             "recall_at_100": 1.0, "map": 2 / 3}


def held_out(rows):
    """The rows with their texts in capitals: other rows to the held-out check (it compares
    text, case kept: encoder/data/overlap.py), the same TF-IDF features (the vectorizer
    lowercases), so the hand-worked scores stay what they were."""
    return [{k: v.upper() if k.startswith("text") else v for k, v in r.items()} for r in rows]


def _pair_regression():
    """Two kinds of pair, "high" (5) and "low" (0): two distinct feature rows, so the ridge
    predictions are two values and both correlations are exactly 1 (-1 if reversed)."""
    row = lambda w, y: {"text_a": f"value {w}", "text_b": f"value {w}", "label": y}  # noqa
    return ([row("high", 5.0), row("low", 0.0)] * 4,
            held_out([row("low", 0.0), row("high", 5.0)] * 3))


def _task(folder, meta: dict, splits: dict) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "task.json"), "w") as f:
        json.dump(meta, f)
    for name, rows in splits.items():
        write_jsonl(os.path.join(folder, name), rows)
    return str(folder)


def every_type(root) -> str:
    """A tasks folder with one toy task of every type."""
    topic_task(root / "topic", n_train=64, n_dev=24)  # io iff the word "file": separable
    pairs = [{"text_a": f"aa {w}", "text_b": f"aa {w}", "label": "same"} for w in "uvw"] + \
        [{"text_a": f"bb {w}", "text_b": f"cc {w}", "label": "other"} for w in "uvw"]
    _task(root / "pairs", {"type": "classification"}, {"train.jsonl": pairs,
                                                       "dev.jsonl": held_out(pairs)})
    train, dev = _pair_regression()
    _task(root / "scores", {"type": "regression"}, {"train.jsonl": train, "dev.jsonl": dev})
    _task(root / "tags", {"type": "tagging"}, {"train.jsonl": TAG_TRAIN, "dev.jsonl": TAG_DEV})
    _task(root / "qa", {"type": "qa"}, {"train.jsonl": QA_TRAIN, "dev.jsonl": QA_DEV})
    _task(root / "sts", {"type": "sts"}, {"test.jsonl": STS_PAIRS})
    _task(root / "search", {"type": "retrieval"}, {"corpus.jsonl": CORPUS,
                                                   "queries.jsonl": QUERIES})
    os.makedirs(root / "search" / "qrels")
    (root / "search" / "qrels" / "test.tsv").write_text(QRELS)
    return str(root)


def suite_csv(path) -> dict:
    """A suite.csv's rows by task name."""
    with open(path) as f:
        return {r["task"]: r for r in csv.DictReader(f)}


FILLERS = [f"w{i}" for i in range(16)]  # the words that are never tagged


def word_decided_tags(n, seed):
    """'alpha' is B-X wherever it stands: the token decides its tag."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = [str(w) for w in rng.choice(FILLERS + ["long_word"], 10)]
        for _ in range(rng.integers(0, 3)):
            words.insert(int(rng.integers(0, len(words) + 1)), "alpha")
        out.append({"tokens": words, "tags": ["B-X" if w == "alpha" else "O" for w in words],
                    "_where": f"free:{i}"})
    return out
