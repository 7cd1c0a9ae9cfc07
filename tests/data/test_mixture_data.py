"""A mixture read from real prepared sources (encoder/data/pipeline.py): each source
prepared once into its own folder, the run's tokenizer drawn from every source, held-out
rows interleaved, and the data order of any step rebuilt from the workdir exactly as the
iterator read it (python -m encoder data)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from encoder import config as config_lib
from encoder.data import mixture, pipeline, preparation, shards, tokenizer as tokenizer_lib
from encoder.jobs import data_order
from encoder.train import phases
from helpers import ROOT, child_env

SEQ = 64


def data_cfg(text_corpus, cache, **over):
    folder, tok = text_corpus
    c = config_lib.base_config()
    c.data.update(dict(tokenizer=tok, cache_dir=cache, seq_len=SEQ))
    c.data.sources = {name: config_lib.mixture_source(os.path.join(folder, f"part{k}.txt"), w)
                      for k, (name, w) in enumerate((("web", 0.6), ("code", 0.3),
                                                     ("books", 0.1)))}
    c.data.update(over)
    return c


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("mixture_cache"))


def prepared_folders(cache: str) -> set:
    return {n for n in os.listdir(cache) if n.startswith("prepared-")}


def test_each_source_is_prepared_once_into_its_own_folder(text_corpus, cache, tmp_path):
    c = data_cfg(text_corpus, cache)
    data = pipeline.open_pretraining_data(c.data, str(tmp_path / "a"), 0)
    assert isinstance(data.train, mixture.Mixture) and len(prepared_folders(cache)) == 3
    folders = {r.corpus.folder for r in data.train.rows}
    assert len(folders) == 3
    for rows in data.train.rows:                 # each the run's tokenizer's, its own split
        assert rows.corpus.tokenizer_fingerprint == data.tokenizer.fingerprint()
    assert data.train.shares() == pytest.approx(dict(web=0.6, code=0.3, books=0.1))
    assert data.token_counts.sum() == sum(data.train.tokens)
    again = pipeline.open_pretraining_data(c.data, str(tmp_path / "b"), 0)  # another run
    assert len(prepared_folders(cache)) == 3                                # nothing redone
    assert again.train.identity() == data.train.identity()
    assert "a mixture of 3 sources (weights as given" in data.description


def test_held_out_rows_come_from_every_source_by_its_share(text_corpus, cache, tmp_path):
    data = pipeline.open_pretraining_data(data_cfg(text_corpus, cache).data, str(tmp_path), 0)
    held = data.valid
    assert isinstance(held, mixture.Interleaved) and set(held.names) == {"web", "code", "books"}
    src, _ = held.locate(np.arange(mixture.HELD_OUT_SLOTS))
    shares = {held.names[s]: n / mixture.HELD_OUT_SLOTS
              for s, n in enumerate(np.bincount(src, minlength=3))}
    assert shares == pytest.approx(dict(web=0.6, code=0.3, books=0.1), abs=2e-3)
    batch = held.read_batch(range(16))
    assert batch["input_ids"].shape == (16, SEQ)


def write_workdir(config, workdir: str) -> None:
    """What the pretraining job leaves for the data order: the resolved config."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json())


@pytest.mark.parametrize("mixed", [True, False])
def test_the_data_order_names_exactly_the_rows_each_step_read(text_corpus, cache, tmp_path,
                                                               mixed):
    c = data_cfg(text_corpus, cache)
    if not mixed:  # one source read through the grain shuffle, as today
        c.data.sources = {}
        c.data.train_files = os.path.join(text_corpus[0], "part0.txt")
    c.train.batch_size = 8
    wd = str(tmp_path / "run")
    write_workdir(c, wd)
    data = pipeline.open_pretraining_data(c.data, wd, 0)
    phase = phases.plan(c).phases[0]
    it = pipeline.batch_iterator(data.train, 8, seed=phases.stream_seed(c.seed, phase))
    batches = [next(it)["input_ids"] for _ in range(4)]
    for step, batch in enumerate(batches, start=1):
        header, rows = data_order.step_rows(wd, step, text_chars=20)
        assert header["stream_rows"] == [8 * (step - 1), 8 * step] and len(rows) == 8
        for row, ids in zip(rows, batch):
            folder = shards.PreparedCorpus(row["folder"])
            tok = tokenizer_lib.load(folder.tokenizer_path)
            packed = shards.PackedRows(folder, "train", SEQ, tok.cls_id, tok.sep_id, tok.pad_id)
            np.testing.assert_array_equal(packed[row["source_row"]]["input_ids"], ids)
            assert row["records"] and all(f.startswith("shards/train-") for f, _ in
                                          row["records"])
    lines = data_order.describe(header, rows)
    assert lines[0].startswith("step 4 (phase 'main'; stream rows 24..31") and len(lines) == 9
    with pytest.raises(data_order.DataOrderError, match="the run has steps 1..1000"):
        data_order.step_rows(wd, 1001)


def test_a_step_past_a_phase_change_is_read_from_its_own_stream(text_corpus, cache, tmp_path):
    c = data_cfg(text_corpus, cache)
    c.train.batch_size = 4
    c.phases = (dict(name="stable", steps=3),
                dict(name="decay", steps=2, data=dict(sources=dict(books=dict(weight=3.0)))))
    wd = str(tmp_path / "run")
    write_workdir(c, wd)
    plan = phases.plan(c)
    decay = plan.phases[1]
    data = pipeline.open_pretraining_data(decay.config.data, wd, 0)
    it = pipeline.batch_iterator(data.train, 4, seed=phases.stream_seed(c.seed, decay))
    first = next(it)["input_ids"]
    header, rows = data_order.step_rows(wd, 4, text_chars=0)  # the decay's first step
    assert header["phase"] == "decay" and header["stream_rows"] == [0, 4]
    assert header["seed"] == 1000
    for row, ids in zip(rows, first):
        folder = shards.PreparedCorpus(row["folder"])
        tok = tokenizer_lib.load(folder.tokenizer_path)
        packed = shards.PackedRows(folder, "train", SEQ, tok.cls_id, tok.sep_id, tok.pad_id)
        np.testing.assert_array_equal(packed[row["source_row"]]["input_ids"], ids)
    with pytest.raises(data_order.DataOrderError, match="no record of the data phase "
                                                        "'stable' read"):
        data_order.step_rows(wd, 1)  # its data was never opened in this workdir


def test_the_tokenizer_is_trained_on_every_declared_source(text_corpus, tmp_path):
    folder, _ = text_corpus
    c = config_lib.base_config()
    c.data.update(dict(seq_len=SEQ, tokenizer_sample_chars=60_000,
                       cache_dir=str(tmp_path / "cache")))
    c.data.sources = dict(a=config_lib.mixture_source(os.path.join(folder, "part0.txt")),
                          b=config_lib.mixture_source(os.path.join(folder, "part2.txt"), 0.0))
    wd = str(tmp_path / "wd")
    data = pipeline.open_pretraining_data(c.data, wd, 400)
    assert os.path.exists(os.path.join(wd, "tokenizer", "sp.model"))
    sample = [n for n in os.listdir(tmp_path / "cache") if n.startswith("tokenizer-sample")]
    text = open(tmp_path / "cache" / sample[0], encoding="utf-8").read()
    drawn = {p.strip() for p in text.split("\n\n") if p.strip()}
    chars = {}
    for part in ("part0.txt", "part2.txt"):  # b has weight 0 here, and is sampled all the same
        docs = {p.strip() for p in open(os.path.join(folder, part), encoding="utf-8").read()
                .split("\n\n") if p.strip()}
        chars[part] = sum(len(d) for d in drawn & docs)
    assert min(chars.values()) > 0.3 * sum(chars.values())  # about an equal share each
    assert data.train.probs.tolist() == [1.0, 0.0] and data.train.rows[1] is None
    assert len(prepared_folders(str(tmp_path / "cache"))) == 1  # b is not read: not prepared


def test_a_prepared_source_is_read_as_it_is_and_must_share_the_tokenizer(text_corpus, cache,
                                                                         tmp_path):
    folder, tok = text_corpus
    out = str(tmp_path / "prepared")
    preparation.prepare(os.path.join(folder, "part1.txt"), out, preparation.Settings(),
                        tokenizer=tok, num_workers=1)
    c = data_cfg(text_corpus, cache)
    c.data.sources.code.files = out
    data = pipeline.open_pretraining_data(c.data, str(tmp_path / "wd"), 0)
    assert out in {r.corpus.folder for r in data.train.rows}
    other = str(tmp_path / "other")
    tokenizer_lib.train_sentencepiece(open(os.path.join(folder, "part2.txt")).read().split(
        "\n\n"), os.path.join(other, "sp"), 300)
    c.data.tokenizer = os.path.join(other, "sp.model")
    with pytest.raises(ValueError, match=r"^data.sources.code \(.*prepared\): .* was tokenized "
                                         "with tokenizer"):
        pipeline.open_pretraining_data(c.data, str(tmp_path / "wd2"), 0)


def test_a_source_that_cannot_be_read_is_named(text_corpus, cache, tmp_path):
    c = data_cfg(text_corpus, cache)
    c.data.sources.books.files = str(tmp_path / "missing" / "*.txt")
    with pytest.raises(Exception, match=r"^data.sources.books \("):
        pipeline.open_pretraining_data(c.data, str(tmp_path / "wd"), 0)
    c = data_cfg(text_corpus, cache, pack_mode="pairs")
    with pytest.raises(ValueError, match="a mixture \\(data.sources\\) is packed by documents"):
        pipeline.open_pretraining_data(c.data, str(tmp_path / "wd"), 0)


def test_the_data_command_prints_a_step(text_corpus, cache, tmp_path):
    c = data_cfg(text_corpus, cache)
    c.train.batch_size = 4
    wd = str(tmp_path / "run")
    write_workdir(c, wd)
    pipeline.open_pretraining_data(c.data, wd, 0)
    run = subprocess.run([sys.executable, "-m", "encoder", "data", f"--workdir={wd}",
                          "--step=2", f"--out={tmp_path}/o.jsonl"], cwd=ROOT,
                         capture_output=True, text=True, env=child_env(), timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("step 2 (phase 'main'; stream rows 4..7")
    assert "4 rows written" in run.stdout
    rows = [json.loads(ln) for ln in open(tmp_path / "o.jsonl")]
    assert [r["row"] for r in rows] == [0, 1, 2, 3]
    assert {r["source"] for r in rows} <= {"web", "code", "books"}
    bad = subprocess.run([sys.executable, "-m", "encoder", "data", f"--workdir={tmp_path}",
                          "--step=1"], cwd=ROOT, capture_output=True, text=True,
                         env=child_env(), timeout=300)
    assert bad.returncode != 0 and "no config.json" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_an_evaluation_reads_the_held_out_rows_the_run_evaluated_on(text_corpus, cache,
                                                                    tmp_path):
    c = data_cfg(text_corpus, cache)
    data = pipeline.open_pretraining_data(c.data, str(tmp_path / "wd"), 0)
    held = pipeline.held_out_rows(c.data, data.tokenizer)       # the cache, from cache_dir
    np.testing.assert_array_equal(held.read_batch(range(40))["input_ids"],
                                  data.valid.read_batch(range(40))["input_ids"])
    c.data.cache_dir = ""
    with pytest.raises(ValueError, match="read from its prepared sources: give the run's "
                                         "workdir"):
        pipeline.held_out_rows(c.data, data.tokenizer)
    with pytest.raises(ValueError, match=r"^data.sources.\w+ \(.*not a prepared corpus"):
        pipeline.held_out_rows(c.data, data.tokenizer, workdir=str(tmp_path / "elsewhere"))


def test_a_source_is_read_in_its_own_format_and_field(text_corpus, cache, tmp_path):
    folder, _ = text_corpus
    docs = [d for d in open(os.path.join(folder, "part1.txt"), encoding="utf-8").read()
            .split("\n\n") if d.strip()][:200]
    path = tmp_path / "code.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "content": d, "url": f"https://x/{i}"}) + "\n")
    c = data_cfg(text_corpus, cache)
    c.data.sources.code = config_lib.mixture_source(str(path), 0.3, format="jsonl",
                                                    text_field="content")
    # the JSONL copies stdlib documents other sources hold too: held out in one, trained in
    # another (measured and refused by default); this test reads formats, not the split
    c.data.max_held_out_overlap = 1.0
    data = pipeline.open_pretraining_data(c.data, str(tmp_path / "wd"), 0)
    code = data.train.rows[data.train.names.index("code")]
    text = data.tokenizer.decode(code.read_batch(range(len(code)))["input_ids"][:, 1:]
                                 .ravel().tolist())
    assert "https://x/" not in text and '"content"' not in text  # the field, not the record
    assert docs[0].split()[0] in text
