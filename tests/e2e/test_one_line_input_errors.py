"""Bad inputs end in one `error: ...` line that names the file and line, or the flag, and
the fix where there is one, exit 1, no traceback, before any work: task files
(fine-tuning and the baselines, through one reader), mining pairs, damaged HuggingFace
folders, a tokenizer vocabulary smaller than the text's characters (prepare and the main
pretraining job) and a --config override naming no field. The checks themselves are
unit-tested in tests/tasks/test_task_file_checks.py, tests/interop/test_hf_files.py and
tests/data/test_vocab_too_small.py."""
import json
import os
import shutil

import pytest

from helpers import minilm_dir, one_line, run_module, write_jsonl

pytestmark = pytest.mark.e2e

ROWS = [{"text": f"a line about {w}", "label": "ab"[i % 2]}
        for i, w in enumerate(["files", "sockets", "threads", "paths", "strings", "dates"])]


def test_baselines_on_null_text_name_the_line(tmp_path):
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    write_jsonl(good, ROWS)
    write_jsonl(bad, ROWS[:3] + [{"text": None, "label": "a"}] + ROWS[3:])
    rc, out, err = run_module("encoder", "baselines", "--task=classification",
                              f"--train={bad}", f"--dev={good}")
    one_line(rc, err, "bad.jsonl:4: 'text' is null; expected a string")
    assert not out.strip()
    dev = tmp_path / "dev.jsonl"
    write_jsonl(dev, [{**r, "text": r["text"].replace("a line", "a note")}  # rows of its own:
                      for r in ROWS[::-1]])  # the training rows as dev are refused by content
    rc, out, err = run_module("encoder", "baselines", "--task=classification",
                              f"--train={good}", f"--dev={dev}")
    assert rc == 0 and "majority" in json.loads(out), err


def test_a_suite_task_with_a_list_label_names_the_line(tmp_path):
    task = tmp_path / "tasks" / "lst"
    task.mkdir(parents=True)
    (task / "task.json").write_text('{"type": "classification"}')
    write_jsonl(task / "train.jsonl", ROWS[:2] + [{"text": "x", "label": ["a"]}] + ROWS[2:])
    write_jsonl(task / "dev.jsonl", ROWS)
    rc, _, err = run_module("encoder", "suite", "--baseline=majority",
                            f"--tasks={tmp_path / 'tasks'}", f"--workdir={tmp_path / 'out'}")
    one_line(rc, err, "lst/train.jsonl:3: label is a list")
    assert not (tmp_path / "out").exists()


def test_a_nan_regression_label_is_refused_before_training(tiny_pretrained, tmp_path):
    rows = [{"text": r["text"], "label": i / 2} for i, r in enumerate(ROWS)]
    path, wd = tmp_path / "train.jsonl", tmp_path / "wd"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]) +
                    '{"text": "x", "label": NaN}\n' +
                    "".join(json.dumps(r) + "\n" for r in rows[2:]))
    rc, _, err = run_module("encoder", "run", "--config=experiments/finetune.py:task=regression,"
                            "runlocal", f"--config.init_from={tiny_pretrained}",
                            f"--config.data.train_file={path}", f"--workdir={wd}")
    one_line(rc, err, "train.jsonl:3: regression label nan is not a finite number")
    assert not (wd / "checkpoints").exists() and "step" not in err


def test_mine_on_malformed_pairs_names_the_line(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    write_jsonl(pairs, [{"text_a": "q", "text_b": "p"}, {"text_a": ["q"], "text_b": "p"}])
    rc, _, err = run_module("encoder", "mine", f"--init_from=hf:{minilm_dir()}",
                            f"--pairs={pairs}", f"--out={tmp_path / 'out.jsonl'}")
    one_line(rc, err, "pairs.jsonl:2: 'text_a' is a list")
    assert not (tmp_path / "out.jsonl").exists()


def _minilm_copy(dst, config_edit=None):
    shutil.copytree(minilm_dir(), dst)
    if config_edit is not None:
        cfg = json.loads((dst / "config.json").read_text())
        config_edit(cfg)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_damaged_hf_folders_are_named_by_import_hf(tmp_path):
    folder = _minilm_copy(tmp_path / "trunc")
    st = folder / "model.safetensors"
    with open(st, "r+b") as f:
        f.truncate(os.path.getsize(st) // 2)
    rc, _, err = run_module("encoder", "import_hf", f"--checkpoint={folder}",
                            f"--out={tmp_path / 'o1'}")
    one_line(rc, err, "trunc/model.safetensors: not a readable safetensors file", "truncated")
    folder = _minilm_copy(tmp_path / "wide", lambda c: c.update(hidden_size=256))
    rc, _, err = run_module("encoder", "import_hf", f"--checkpoint={folder}",
                            f"--out={tmp_path / 'o2'}")
    one_line(rc, err, "wide/config.json: hidden_size is 256, but the weights", "have 384",
             "set hidden_size to 384")
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_a_vocabulary_smaller_than_the_characters_names_the_flag(tmp_path):
    text = tmp_path / "doc.txt"
    text.write_text(" ".join(chr(c) * 3 for c in range(0x3B1, 0x3CA)) * 20 + "\n" +
                    "plain words of text " * 50 + "\n")
    rc, _, err = run_module("encoder", "prepare", f"--input={text}", f"--out={tmp_path / 'c'}",
                            "--vocab_size=20", "--valid_fraction=0")
    one_line(rc, err, "--vocab_size=20: the tokenizer needs at least", "give --vocab_size=")
    assert not (tmp_path / "c").exists()
    rc, _, err = run_module("encoder", "run", "--config=experiments/pretrain.py:runlocal",
                            f"--config.data.train_files={text}", "--config.model.vocab_size=20",
                            f"--workdir={tmp_path / 'wd'}")
    one_line(rc, err, "--config.model.vocab_size=20: the tokenizer needs at least",
             "give --config.model.vocab_size=")


def test_an_unknown_config_override_names_the_override_and_close_fields(tmp_path):
    wd = tmp_path / "wd"
    rc, _, err = run_module("encoder", "run", "--config=experiments/pretrain.py:runlocal",
                            "--config.train.x=1", f"--workdir={wd}")
    one_line(rc, err, "--config.train.x: 'x' is not a field of config.train.",
             "learning_rate")  # no close name: the fields it has
    rc, _, err = run_module("encoder", "run", "--config=experiments/pretrain.py:runlocal",
                            "--config.train.learning_rat=1", f"--workdir={wd}")
    one_line(rc, err, "--config.train.learning_rat: 'learning_rat' is not a field of "
             'config.train. Did you mean "learning_rate" (--config.train.learning_rate)')
    assert not wd.exists()


def test_a_misspelt_experiment_and_an_undeclared_evaluator_say_what_to_type(tmp_path):
    """config_flags' "earlier failure to load" and an empty field list once gave no way
    forward."""
    wd = tmp_path / "wd"
    rc, _, err = run_module("encoder", "run", "--config=experiments/pretrian.py:runlocal",
                            f"--workdir={wd}")
    one_line(rc, err, "--config=experiments/pretrian.py: no such experiment file; did you "
             "mean experiments/pretrain.py?")
    rc, _, err = run_module("encoder", "run", "--config=experiments", f"--workdir={wd}")
    one_line(rc, err, "--config=experiments is a folder: give an experiment file in it "
             "(experiments/albert_base.py")
    rc, _, err = run_module("encoder", "run", f"--workdir={wd}")  # no --config at all
    one_line(rc, err, "--config=experiments/NAME.py[:arg] is required")
    rc, _, err = run_module("encoder", "run", "--config=experiments/pretrain.py:runlocal",
                            "--config.evals.mine.kind=heldout", f"--workdir={wd}")
    one_line(rc, err, "'mine' is not a field of config.evals. config.evals is empty: declare "
             "evaluators with experiments/pretrain.py:evals=TASK+TASK")
    assert not wd.exists()


def test_embed_refuses_a_pooling_typo_and_text_that_is_not_utf8_before_the_model(tmp_path):
    """Once a KeyError traceback, and Latin-1 stored as U+FFFD."""
    text = tmp_path / "lat1.txt"
    text.write_bytes("ok\ncaf\xe9 na\xefve\n".encode("latin-1"))
    common = [f"--config.init_from={tmp_path / 'no_model'}", f"--config.data.input_file={text}",
              f"--workdir={tmp_path / 'out'}"]
    rc, _, err = run_module("encoder", "run", "--config=experiments/embed.py:pooling=meen", *common)
    one_line(rc, err, "'meen'", "mean")
    rc, _, err = run_module("encoder", "run", "--config=experiments/embed.py", *common)
    one_line(rc, err, f"{text}:2: not valid UTF-8 (byte 0xe9")
    assert not (tmp_path / "out").exists()


def test_a_file_for_a_folder_and_a_finetune_config_for_bench_say_what_to_give(tmp_path):
    """Once "no config.json" for the config.json itself, and an AttributeError traceback
    from bench --mode=step."""
    folder = tmp_path / "hf47"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    rc, _, err = run_module("encoder", "import_hf", f"--checkpoint={folder / 'config.json'}",
                            f"--out={tmp_path / 'out'}")
    one_line(rc, err, f"{folder / 'config.json'} is a file: give its folder {folder}")
    rc, _, err = run_module("encoder", "bench", "--mode=step",
                            "--config=experiments/finetune.py:task=classification,runlocal")
    one_line(rc, err, "a finetune experiment; --mode=step reads pretraining experiments",
             "--mode=compile --job=finetune")


def test_an_experiment_option_refused_by_the_experiment_is_its_own_line(tmp_path):
    """(It once read `flag --config=...: Error whilst parsing config file:
    encoder.errors.UsageError: evals='nosuch': ...`.)"""
    rc, out, err = run_module("encoder", "run",
                              "--config=experiments/pretrain.py:runlocal,evals=nosuch",
                              f"--workdir={tmp_path / 'w'}")
    one_line(rc, err, "evals='nosuch': the embedded suite has topic")
    assert "Error whilst parsing" not in err and "UsageError" not in err
