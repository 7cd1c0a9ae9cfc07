"""mteb evaluates the wrapper on a local retrieval task and finds our BEIR figures."""
import zlib

import numpy as np
import pytest

from encoder.retrieval import beir
from encoder.retrieval.mteb_model import MtebEncoder
from helpers import TORCH_GROUP

pytestmark = TORCH_GROUP  # imports torch (helpers.TORCH_GROUP)

WORDS = ["file", "socket", "thread", "path", "string", "number", "date", "list", "dict", "set"]


def bag_of_words(texts):
    """A deterministic toy encoder: hashed word counts (no model, no compile)."""
    out = np.zeros((len(texts), 16), np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().split():
            out[i, sum(map(ord, w)) % 16] += 1.0
        # a text-dependent jitter: no two documents tie (tie order is each tool's own)
        out[i] += 0.05 * np.random.default_rng(zlib.crc32(t.encode())).random(16)
    return out


def _data():
    rng = np.random.default_rng(0)
    corpus = [{"_id": f"d{i}", "title": "", "text": " ".join(rng.choice(WORDS, 5))}
              for i in range(40)]
    queries = [{"_id": f"q{i}", "text": " ".join(rng.choice(corpus[i]["text"].split(), 2))}
               for i in range(12)]
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(12)}
    return corpus, queries, qrels


def test_mteb_runs_the_wrapper_on_a_local_task():
    mteb = pytest.importorskip("mteb")
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata
    corpus, queries, qrels = _data()

    class LocalRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            type="Retrieval", name="LocalRetrieval", main_score="ndcg_at_10",
            description="a local retrieval task", reference="https://example.org",
            dataset={"path": "NA", "revision": "NA"}, category="t2t", eval_splits=["test"],
            eval_langs=["eng-Latn"], date=("2026-01-01", "2026-01-01"), dialect=["Written"],
            domains=[], task_subtypes=[], license="cc-by-4.0", annotations_creators="derived",
            modalities=["text"], sample_creation="found", bibtex_citation="")

        def load_data(self, num_proc=None, **kwargs):
            split = RetrievalSplitData(
                queries=Dataset.from_list([{"id": q["_id"], "text": q["text"]} for q in queries]),
                corpus=Dataset.from_list([{"id": d["_id"], "text": d["text"], "title": ""}
                                          for d in corpus]),
                relevant_docs=qrels, top_ranked=None)
            self.dataset = {"default": {"test": split}}
            self.data_loaded = True

    model = MtebEncoder(bag_of_words)
    result = mteb.evaluate(model, LocalRetrieval(), cache=None, show_progress_bar=False)
    scores = result.task_results[0].scores["test"][0]
    ours = beir.evaluate_dense(bag_of_words, bag_of_words, corpus, queries, qrels)[16]
    np.testing.assert_allclose(scores["ndcg_at_10"], ours["ndcg_at_10"], atol=1e-4)
    np.testing.assert_allclose(scores["recall_at_10"], ours["recall_at_10"], atol=1e-4)
    np.testing.assert_allclose(scores["mrr_at_10"], ours["mrr_at_10"], atol=1e-4)
