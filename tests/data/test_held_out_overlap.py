"""Held-out means held out: overlap with training measured by content (encoder/data/overlap.py),
refused past data.max_held_out_overlap (1%), said below it, at every door that has a
held-out split: pretraining's valid_files and own split, fine-tuning's dev/test files,
`baselines`, the suite's tasks."""
import json
import os
import shutil

import numpy as np
import pytest

from encoder import config as config_lib
from encoder.data import overlap, pipeline
from encoder.tasks import baselines, catalog
from encoder.tasks.files import TaskDataError, row_key

from helpers import write_jsonl

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
         "rho sigma tau upsilon phi chi psi omega").split()


def documents(n: int, seed: int) -> list[str]:
    """n distinct one-line documents of 12 random words, each led by its own number."""
    rng = np.random.default_rng(seed)
    return [f"doc{seed}x{i} " + " ".join(rng.choice(WORDS, 12)) for i in range(n)]


def respaced(text: str) -> str:
    """The same text with other whitespace: what a copy through an editor leaves."""
    return "  " + text.replace(" ", " \t ", 3) + " "


def oracle(held: list[str], train: list[str]) -> int:
    """Held-out rows whose words, in order, are a training row's (the definition, directly)."""
    seen = {tuple(t.split()) for t in train}
    return sum(tuple(h.split()) in seen for h in held)


# ----------------------------------------------------------------------- the measure

def test_measure_counts_each_held_out_row_and_finds_the_first():
    train = [overlap.text_key(t) for t in ("a b", "c d", "e f")]
    held = [overlap.text_key(t) for t in ("x", "c  d", "c d", None or "y")] + [None]
    rows, shared, first = overlap.measure(held, iter(train))
    assert (rows, shared, first) == (4, 2, 1)
    assert overlap.measure([None], iter(train)) == (0, 0, -1)


def test_verdict_refuses_past_the_share_and_says_below_it():
    o = overlap.Overlap("dev", "train", rows=200, shared=3)
    with pytest.raises(overlap.HeldOutOverlap) as e:
        overlap.verdict(o, 0.01, "--flag")
    assert "3 of 200 held-out rows (1.5%)" in str(e.value) and "--flag=SHARE" in str(e.value)
    assert "\n" not in str(e.value)
    line = overlap.verdict(o, 0.02)
    assert "3 of 200" in line and "kept" in line
    assert overlap.verdict(overlap.Overlap("dev", "train", 200, 0)) is None


def test_a_row_is_its_input_fields_whitespace_aside_labels_left_out():
    a = {"text_a": "the cat", "text_b": "sat", "label": "x", "_where": "f:1"}
    assert row_key(a) == row_key({"text_a": " the\tcat ", "text_b": "sat", "label": "y"})
    assert row_key(a) != row_key({"text_a": "the cat sat", "text_b": ""})  # fields stay apart
    assert row_key({"tokens": ["a", "b"], "tags": ["O", "O"]}) == row_key(
        {"tokens": ["a", "b"], "tags": ["B", "O"]})
    assert row_key({"label": 1}) is None


# ----------------------------------------------------------------------- pretraining

def _data_cfg(tmp_path, train, valid, tok_path, **kw):
    cfg = config_lib.base_config().data
    cfg.train_files, cfg.valid_files, cfg.tokenizer = train, valid, tok_path
    cfg.one_doc_per_line = True
    cfg.cache_dir = str(tmp_path / "cache")
    cfg.update(kw)
    return cfg


def _lines(path, docs):
    path.write_text("\n".join(docs) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, text_corpus):
    """(folder, tokenizer, training documents, fresh documents)."""
    d = tmp_path_factory.mktemp("overlap")
    train, fresh = documents(400, 1), documents(400, 2)
    _lines(d / "train.txt", train)
    return d, text_corpus[1], train, fresh


def test_a_byte_copy_of_the_training_file_is_refused_by_content(tmp_path, corpora):
    d, tok, train, _ = corpora
    shutil.copy(d / "train.txt", tmp_path / "copy.txt")  # another path, the same documents
    cfg = _data_cfg(tmp_path, str(d / "train.txt"), str(tmp_path / "copy.txt"), tok)
    with pytest.raises(overlap.HeldOutOverlap) as e:
        pipeline.open_pretraining_data(cfg, str(tmp_path / "w"), 2000)
    assert f"{len(train)} of {len(train)} held-out documents (100.0%)" in str(e.value)
    assert "--config.data.max_held_out_overlap" in str(e.value)


def test_held_out_documents_that_are_training_documents_past_the_share(tmp_path, corpora,
                                                                       capsys):
    d, tok, train, fresh = corpora
    held = [respaced(t) for t in train[:40]] + fresh
    valid = _lines(tmp_path / "valid.txt", held)
    expected = oracle(held, train)
    assert expected == 40
    cfg = _data_cfg(tmp_path, str(d / "train.txt"), valid, tok)
    with pytest.raises(overlap.HeldOutOverlap) as e:
        pipeline.open_pretraining_data(cfg, str(tmp_path / "w"), 2000)
    assert f"{expected} of {len(held)} held-out documents ({expected / len(held):.1%})" in str(
        e.value)
    cfg.max_held_out_overlap = 0.2  # accepted when asked, and said
    data = pipeline.open_pretraining_data(cfg, str(tmp_path / "w"), 2000)
    assert data.valid is not None
    err = capsys.readouterr().err
    assert f"held-out: data.valid_files={valid}: {expected} of {len(held)}" in err
    assert "kept" in err
    cached = [n for n in os.listdir(tmp_path / "cache") if n.startswith("overlap-")]
    assert len(cached) == 1  # a restart on the same shards reads the counts back
    with open(tmp_path / "cache" / cached[0]) as f:
        assert json.load(f) == {"rows": len(held), "shared": expected}


def test_a_few_shared_documents_are_said_with_their_count(tmp_path, corpora, capsys):
    d, tok, train, fresh = corpora
    held = fresh + [train[7]]
    valid = _lines(tmp_path / "valid.txt", held)
    cfg = _data_cfg(tmp_path, str(d / "train.txt"), valid, tok)
    data = pipeline.open_pretraining_data(cfg, str(tmp_path / "w"), 2000)
    assert data.valid is not None
    assert f"1 of {len(held)} held-out documents" in capsys.readouterr().err


def test_the_corpus_own_split_is_measured_too(tmp_path, corpora, capsys):
    """A document twice with other spacing: the hash split (of the raw text) can put the
    copies on both sides; the tokens cannot tell them apart, and neither does the check."""
    d, tok, train, _ = corpora
    docs = train + [respaced(t) for t in train]
    cfg = _data_cfg(tmp_path, _lines(tmp_path / "t.txt", docs), "", tok, valid_fraction=0.1)
    with pytest.raises(overlap.HeldOutOverlap) as e:
        pipeline.open_pretraining_data(cfg, str(tmp_path / "w"), 2000)
    assert "the held-out split of" in str(e.value)


def test_pairs_in_memory_are_measured_as_text():
    train = documents(50, 3)
    o = overlap.check_texts([respaced(train[0])] + documents(50, 4), train, "v", "t",
                            max_share=0.05)
    assert (o.rows, o.shared) == (51, 1)
    with pytest.raises(overlap.HeldOutOverlap):
        overlap.check_texts(train[:5], train, "v", "t")


# ----------------------------------------------------------------------- task files

def _topic_rows(n, seed):
    return [{"text": t, "label": "a" if i % 2 else "b"} for i, t in enumerate(documents(n, seed))]


def test_baselines_refuse_a_dev_file_of_training_rows(tmp_path, capsys):
    train = _topic_rows(200, 5)
    dev = [{**r, "text": respaced(r["text"])} for r in train[:60]] + _topic_rows(17, 6)
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "dev.jsonl", dev)
    expected = oracle([r["text"] for r in dev], [r["text"] for r in train])
    with pytest.raises(TaskDataError) as e:
        baselines.run("classification", str(tmp_path / "train.jsonl"),
                      str(tmp_path / "dev.jsonl"))
    msg = str(e.value)
    assert f"{expected} of 77 held-out rows ({expected / 77:.1%})" in msg
    assert f"the first: {tmp_path / 'dev.jsonl'}:1" in msg
    assert "--max_held_out_overlap" in msg
    # below the share: scored, and the count said on stderr (stdout is the JSON)
    write_jsonl(tmp_path / "dev.jsonl", _topic_rows(150, 6) + [train[3]])
    scores = baselines.run("classification", str(tmp_path / "train.jsonl"),
                           str(tmp_path / "dev.jsonl"))
    assert "bow" in scores
    assert "held-out: --dev=" in capsys.readouterr().err


def test_the_baselines_command_says_it_in_one_line(tmp_path):
    from helpers import one_line, run_module
    train = _topic_rows(60, 5)
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "dev.jsonl", train[:20] + _topic_rows(20, 6))
    rc, _, err = run_module("encoder", "baselines", "--task=classification",
                            f"--train={tmp_path / 'train.jsonl'}",
                            f"--dev={tmp_path / 'dev.jsonl'}", timeout=120)
    one_line(rc, err, "20 of 40 held-out rows (50.0%)")
    rc, out, err = run_module("encoder", "baselines", "--task=classification",
                              f"--train={tmp_path / 'train.jsonl'}",
                              f"--dev={tmp_path / 'dev.jsonl'}", "--max_held_out_overlap=0.5",
                              timeout=120)
    assert rc == 0, err
    assert "bow" in json.loads(out) and "20 of 40" in err


def test_fine_tuning_refuses_a_dev_file_of_training_rows(tmp_path, text_corpus):
    from encoder.jobs import finetune
    from helpers import _finetune_experiment
    train = _topic_rows(80, 5)
    write_jsonl(tmp_path / "train.jsonl", train)
    write_jsonl(tmp_path / "dev.jsonl", train[10:30] + _topic_rows(20, 6))
    write_jsonl(tmp_path / "test.jsonl", _topic_rows(20, 7))
    config = _finetune_experiment().get_config("task=classification,runlocal")
    config.data.tokenizer = text_corpus[1]  # from scratch: nothing to load
    config.data.train_file = str(tmp_path / "train.jsonl")
    config.data.dev_file = str(tmp_path / "dev.jsonl")
    config.data.test_file = str(tmp_path / "test.jsonl")
    with pytest.raises(TaskDataError) as e:
        finetune.build(config, str(tmp_path / "w"))
    assert f"--config.data.dev_file={tmp_path / 'dev.jsonl'}: 20 of 40 held-out rows" in str(
        e.value)
    assert "--config.data.max_held_out_overlap" in str(e.value)


# ----------------------------------------------------------------------- the suite

def _task_folder(root, name, train, dev, meta=None):
    d = root / name
    d.mkdir(parents=True)
    write_jsonl(d / "train.jsonl", train)
    write_jsonl(d / "dev.jsonl", dev)
    (d / "task.json").write_text(json.dumps(meta or {"type": "classification"}))
    return d


def test_a_suite_task_whose_dev_rows_are_training_rows_is_refused_by_name(tmp_path):
    train = _topic_rows(100, 5)
    _task_folder(tmp_path / "tasks", "leaky", train, train[:30] + _topic_rows(30, 6))
    tasks, _ = catalog.discover(str(tmp_path / "tasks"))
    with pytest.raises(TaskDataError) as e:
        catalog.prepare(tasks[0], str(tmp_path / "data"), [0])
    assert str(e.value).startswith("task leaky: ")
    assert "30 of 60 held-out rows" in str(e.value) and "--only" in str(e.value)


def test_suite_bow_refuses_a_one_class_task_as_the_model_suite_does(tmp_path):
    from encoder.studies.suite import baseline
    one = [{"text": t, "label": "only"} for t in documents(20, 8)]
    _task_folder(tmp_path / "tasks", "one_class", one, [{"text": "x y", "label": "only"}])
    _task_folder(tmp_path / "tasks", "fine", _topic_rows(40, 5), _topic_rows(10, 6))
    tasks, _ = catalog.discover(str(tmp_path / "tasks"))
    prepared = {t.name: catalog.prepare(t, str(tmp_path / "data"), [0]) for t in tasks}
    with pytest.raises(TaskDataError):  # the model's suite: refused before any run
        catalog.check_scorable(tasks[1], "train", one, "train.jsonl")
    scored, rows, _, failures = baseline.score_tasks("bow", tasks, prepared, [0], 0,
                                                     str(tmp_path / "out"), "rule")
    assert [r["task"] for r in rows] == ["fine"]  # never a 100.00 in the average
    assert len(failures) == 1 and failures[0].startswith("one_class/bow: TaskDataError")
    assert "only one label" in failures[0]


# ----------------------------------------------------------------------- evaluate

def test_evaluate_refuses_valid_files_the_source_trained_on(tmp_path, tiny_pretrained):
    """The run's own training documents given as --config.data.valid_files: measured against
    the prepared folders its data_order.json names."""
    from encoder.data import corpus
    from encoder.jobs import evaluate
    from helpers import experiment_config
    trained = [d for d in corpus.stdlib_documents() if "\n\n" not in d and d == d.strip()
               and not corpus.is_validation(d, 0.05)][:60]
    valid = tmp_path / "valid.txt"
    valid.write_text("\n\n".join(trained) + "\n")
    config = experiment_config("evaluate", None)
    config.init_from = tiny_pretrained
    config.data.valid_files = str(valid)
    with pytest.raises(overlap.HeldOutOverlap) as e:
        evaluate.evaluate(config, str(tmp_path / "out"))
    assert f"--config.data.valid_files={valid}: 60 of 60 held-out documents (100.0%)" in str(
        e.value)
    assert f"what {tiny_pretrained} trained on" in str(e.value)
