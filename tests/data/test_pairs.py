"""Prepared pair corpora (encoder/data/pairs.py): the contrastive task reads from one the
arrays it makes from the same JSONL lines, bad lines are skipped and counted, and a corpus
is refused where its records, tokenizer or prefixes are not the run's."""
import json
import types

import numpy as np
import pytest

from encoder.data import pairs, preparation, shards, tokenizer as tokenizer_lib
from encoder.tasks.base import TaskDataError
from encoder.tasks.contrastive import Contrastive

BAD_LINES = ['{"text_a": "no positive"}', "not json at all",
             '{"text_a": "q", "text_b": "p", "negatives": "one string"}']
PREFIXES = dict(query_prefix="query: ", passage_prefix="passage: ")


def _pairs(docs):
    """Pairs from stdlib documents: 0 to 3 negatives, a repeated positive, a repeated query,
    a negative that is another row's positive, and unicode."""
    rows = []
    for i in range(0, 2 * 240, 2):
        a, b = docs[i][:80], docs[i + 1][:300]
        rows.append({"text_a": a, "text_b": b,
                     "negatives": [docs[(i + 7 * j + 3) % len(docs)][:200]
                                   for j in range((i // 2) % 4)]})
    rows[5]["text_b"] = rows[4]["text_b"]
    rows[9]["text_a"] = rows[8]["text_a"]
    rows[12]["negatives"] = [rows[13]["text_b"]]
    rows[20]["text_a"] = "naïve café — ünïcode"
    return rows


@pytest.fixture(scope="module")
def pair_corpus(text_corpus, tmp_path_factory):
    from encoder.data import corpus
    folder, tok_path = text_corpus
    rows = _pairs(corpus.stdlib_documents()[:600])
    d = tmp_path_factory.mktemp("pairs")
    path = str(d / "pairs.jsonl")
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    lines[30:30] = BAD_LINES[:2]
    lines.append(BAD_LINES[2])
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    out = str(d / "prepared")
    s = preparation.Settings(one_doc_per_line=True, valid_fraction=0.0, shard_mb=0.02,
                         records="pairs", **PREFIXES)
    manifest = preparation.prepare(path, out, s, tokenizer=tok_path, num_workers=1)
    return rows, path, out, manifest, tokenizer_lib.load(tok_path)


def _task(tok, max_len=24, **contrastive):
    config = types.SimpleNamespace(data=types.SimpleNamespace(max_seq_len=max_len),
                                   contrastive=types.SimpleNamespace(**contrastive))
    return Contrastive(config, tok)


def _same(ids):
    """Which texts are the same text: the equality matrix over every id of a batch."""
    flat = np.concatenate([np.ravel(ids[k]) for k in ("a_text_id", "b_text_id", "n_text_id")
                           if k in ids])
    return (flat[:, None] == flat[None, :]) & (flat[:, None] >= 0)


def test_manifest_counts_pairs_bad_lines_and_negatives(pair_corpus):
    rows, _, out, manifest, _ = pair_corpus
    assert manifest["records"] == "pairs" and manifest["units"] > 3
    assert manifest["splits"]["train"]["documents"] == len(rows)
    assert manifest["splits"]["valid"]["documents"] == 0
    assert manifest["stats"]["bad_records"] == len(BAD_LINES)
    assert manifest["max_negatives"] == 3
    assert any("no string 'text_b'" in x for x in manifest["stats"]["skipped"])
    assert "pairs" in preparation.summary(manifest)


@pytest.mark.parametrize("num_negatives", [0, 2])
def test_rows_read_back_equal_the_task_featurizing_the_same_lines(pair_corpus, num_negatives):
    rows, _, out, _, tok = pair_corpus
    task = _task(tok, num_negatives=num_negatives, **PREFIXES)
    source = task.training_source(out)
    assert len(source) == len(rows)
    want, _ = task.featurize(rows)
    dup = [5, 4, 9, 8, 13, 12]  # the duplicates' rows, then others drawn over every shard
    rest = [i for i in np.random.default_rng(0).permutation(len(rows)) if i not in dup]
    order = np.asarray(dup + rest[:58])
    got = source.read_batch(order)
    assert set(got) == set(want) | {"weight"}
    for k, v in want.items():
        if not k.endswith("_text_id"):
            np.testing.assert_array_equal(got[k], v[order], err_msg=k)
    np.testing.assert_array_equal(_same(got), _same({k: v[order] for k, v in want.items()}))
    assert (_same(got) & ~np.eye(len(_same(got)), dtype=bool)).sum() >= 2 * 3  # 3 duplicates
    np.testing.assert_array_equal(got["weight"], np.ones(len(order)))


def test_a_run_on_other_prefixes_is_refused(pair_corpus):
    _, _, out, _, tok = pair_corpus
    with pytest.raises(TaskDataError, match="prepared with query_prefix='query: '"):
        _task(tok, query_prefix="", passage_prefix="passage: ").training_source(out)


def test_pair_and_text_corpora_are_not_read_as_each_other(pair_corpus, text_corpus, tmp_path):
    _, _, out, _, tok = pair_corpus
    with pytest.raises(shards.CorpusError, match="pairs records.*pretraining reads text"):
        shards.PackedRows(shards.PreparedCorpus(out), "train", 32, 1, 2, 0)
    from encoder import config as config_lib
    from encoder.data import pipeline
    data_cfg = config_lib.base_config().data
    data_cfg.update(train_files=out, seq_len=32)
    with pytest.raises(shards.CorpusError, match="pairs records.*pretraining reads text"):
        pipeline.open_pretraining_data(data_cfg, str(tmp_path / "wd"), 0)
    assert not (tmp_path / "wd").exists()  # refused before the workdir got a tokenizer
    folder, tok_path = text_corpus
    text_out = str(tmp_path / "text")
    preparation.prepare(folder, text_out, preparation.Settings(shard_mb=1.0), tokenizer=tok_path)
    with pytest.raises(shards.CorpusError, match="text records.*contrastive task reads pairs"):
        _task(tok).training_source(text_out)


def test_another_tokenizer_is_refused(pair_corpus, tmp_path):
    from encoder.data import corpus
    _, _, out, _, _ = pair_corpus
    other = tokenizer_lib.load(tokenizer_lib.train_sentencepiece(
        corpus.stdlib_documents()[:300], str(tmp_path / "sp"), 500))
    with pytest.raises(shards.CorpusError, match="tokenized with tokenizer"):
        _task(other, **PREFIXES).training_source(out)


def test_pair_settings_are_checked_before_anything_is_written(tmp_path):
    for s, match in ((preparation.Settings(records="pairs"), "one JSON object a line"),
                     (preparation.Settings(passage_prefix="p: "), "for --records=pairs"),
                     (preparation.Settings(records="rows"), "--records='rows'")):
        with pytest.raises(ValueError, match=match):
            preparation.check_settings(s)


def test_a_record_round_trips_with_hashes_of_the_raw_texts():
    pair = {"text_a": "q", "text_b": "p", "negatives": ["n1", "q"]}
    ids = [[5, 6], [7], [], [70000, 1]]
    hashes, back = pairs.decode_record(pairs.encode_record(pair, ids, "int32"), "int32")
    assert [list(x) for x in back] == ids
    assert hashes[0] == hashes[3] != hashes[1]  # the same raw text, the same id
    assert all(0 <= h < 2**31 for h in hashes)


def test_the_finetune_job_trains_on_the_corpus_what_it_trains_on_from_jsonl(
        pair_corpus, text_corpus, tmp_path):
    """The job's training rows: the same first batches from the prepared corpus as from
    the JSONL file it was made from (bad lines aside), and the same number of steps."""
    import jax
    from encoder.data import pipeline
    from encoder.jobs import finetune
    from experiments import finetune as finetune_exp
    rows, path, out, _, _ = pair_corpus
    good = str(tmp_path / "good.jsonl")
    with open(good, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    batches = {}
    for name, train_file in (("jsonl", good), ("prepared", out)):
        config = finetune_exp.get_config("task=contrastive")
        config.model.update(dict(hidden_size=32, intermediate_size=64, num_layers=1,
                                 num_heads=2, max_position=32))
        config.data.update(train_file=train_file, tokenizer=text_corpus[1], max_seq_len=24)
        config.train.batch_size = 16
        config.contrastive.update(dict(num_negatives=2, **PREFIXES))
        run = finetune.build(config, str(tmp_path / name), devices=jax.devices()[:1])
        it = pipeline.batch_iterator(run.train_source, 16, seed=3)
        batches[name] = [next(it) for _ in range(3)]
        assert run.steps_per_epoch == len(rows) // 16
    for a, b in zip(batches["jsonl"], batches["prepared"]):
        assert set(a) == set(b)
        for k in a:
            if not k.endswith("_text_id"):
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        np.testing.assert_array_equal(_same(a), _same(b))
