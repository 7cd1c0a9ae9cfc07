"""A new user's mistakes, through the commands: merge, mine, a phase's values, tasks,
bench's --topology, import_hf and the suite's grid refuse in one line, before they read a
model or write a byte, and what they write is theirs (docs/failure_modes.md)."""
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from encoder import errors
from encoder.checkpoints import store
from encoder.jobs import merge

from helpers import ROOT, minilm_dir, one_line, run_module, snapshot, topic_task, write_jsonl

pytestmark = pytest.mark.e2e


@pytest.fixture
def twin(tiny_pretrained, tmp_path):
    """A second run of the same model (a copy of the session's tiny_pretrained workdir)."""
    path = tmp_path / "twin"
    shutil.copytree(tiny_pretrained, path, ignore=shutil.ignore_patterns("LOCK"))
    return str(path)


def test_merge_mistakes_are_refused_before_a_checkpoint_is_read(tiny_pretrained, twin,
                                                                tmp_path, monkeypatch):
    out = tmp_path / "merged"
    rc, _, err = run_module("encoder", "merge", f"--workdirs={tiny_pretrained},{twin}",
                            "--weights=0.9,0.1", f"--out={out}")  # were recorded, not applied
    one_line(rc, err, "--weights=0.9,0.1 applies to --method=weighted")
    before = snapshot(tiny_pretrained)

    def read(*_):
        raise AssertionError("a checkpoint was read")
    monkeypatch.setattr(merge, "load_checkpoint", read)
    both = f"{tiny_pretrained},{twin}"
    for kwargs, words in [
            (dict(workdirs=both, method="weighted", weights="a"), "--weights=a: expected"),
            (dict(workdirs=both, method="weighted", weights="1,2,3"), "3 values for 2"),
            (dict(workdirs=both, method="weighted"), "needs --weights"),
            (dict(workdirs=f"{tiny_pretrained},{tiny_pretrained}"), "twice"),
            (dict(workdirs=f"{tiny_pretrained}@6,{tiny_pretrained}@6"), "@6 twice"),
            (dict(workdirs=tiny_pretrained, last=3), "--last=3: "),
            (dict(workdirs=tiny_pretrained, last=-1), "--last=-1")]:
        with pytest.raises(errors.UsageError) as e:
            merge.merge(out=str(out), **kwargs)
        assert words in str(e.value), (kwargs, str(e.value))
    assert "has 1 checkpoint (steps [6])" in _refusal(tiny_pretrained, out, last=3)
    monkeypatch.undo()
    with pytest.raises(errors.UsageError, match="--workdirs reaches .*@6 twice"):
        merge.merge(f"{tiny_pretrained},{tiny_pretrained}@6", str(out))  # known once read
    assert not out.exists()
    assert snapshot(tiny_pretrained) == before


def _refusal(workdirs, out, **kwargs) -> str:
    with pytest.raises(errors.UsageError) as e:
        merge.merge(workdirs, str(out), **kwargs)
    return str(e.value)


def test_a_merge_stopped_while_it_rewrites_its_folder_is_not_an_init_from(
        tiny_pretrained, twin, tmp_path, monkeypatch):
    out = str(tmp_path / "merged")
    merge.merge(tiny_pretrained, out)
    assert store.is_params_folder(out)

    def stopped(*_, **__):
        raise KeyboardInterrupt
    monkeypatch.setattr(store, "save_params", stopped)
    with pytest.raises(KeyboardInterrupt):
        merge.merge(f"{tiny_pretrained},{twin}", out)
    # the old merge's model_config.json is gone with it: never a mix that looks complete
    assert not store.is_params_folder(out)
    assert not os.path.exists(os.path.join(out, "merge.json"))
    monkeypatch.undo()
    record = merge.merge(f"{tiny_pretrained},{twin}", out)
    assert store.is_params_folder(out) and len(record["inputs"]) == 2


def test_mine_refuses_in_one_line_and_its_ctrl_c_is_one_line(tiny_pretrained, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    write_jsonl(pairs, [{"text_a": f"how do I read file number {i}",
                         "text_b": f"open() returns a file object; {i} bytes"} for i in range(3000)])
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    rc, _, err = run_module("encoder", "mine", "--init_from=/nonexistent",
                            f"--pairs={pairs}", f"--out={folder}")
    one_line(rc, err, f"--out={folder} is a folder")
    assert snapshot(tmp_path) == before  # no FOLDER.tmp beside it
    out = tmp_path / "triples.jsonl"
    p = subprocess.Popen([sys.executable, "-m", "encoder", "mine",
                          f"--init_from={tiny_pretrained}", f"--pairs={pairs}", f"--out={out}",
                          "--verbosity=0"],  # its reading of the model logs: the moment to stop
                         cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"},
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in p.stderr:  # the model is being read: the embedding comes next
        if "checkpoint" in line:
            break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == errors.INTERRUPTED_EXIT_CODE, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted", err
    assert snapshot(tmp_path) == before  # no triples, no scratch file


def test_a_phase_value_of_the_wrong_kind_is_one_line_and_leaves_no_workdir(tmp_path):
    wd = tmp_path / "wd"
    rc, _, err = run_module("encoder", "run", "--config=experiments/pretrain.py:runlocal",
                            '--config.phases=({"name": "a", "steps": 2, '
                            '"train": {"batch_size": 2.5}},)', f"--workdir={wd}")
    one_line(rc, err, "phases[0] ('a'): train.batch_size must be an integer", "got 2.5")
    assert not wd.exists()


def test_stdlib_tasks_writes_only_a_folder_of_its_own(tmp_path):
    mine = tmp_path / "mine"
    (mine / "topic").mkdir(parents=True)
    (mine / "topic" / "train.jsonl").write_text('{"text": "my own", "label": "x"}\n')
    before = snapshot(mine)
    rc, _, err = run_module("encoder", "tasks", f"--out={mine}")
    one_line(rc, err, "did not write")
    assert snapshot(mine) == before
    rc, _, err = run_module("encoder", "tasks", f"--out={mine / 'topic' / 'train.jsonl'}")
    one_line(rc, err, "is a file")
    rc, _, err = run_module("encoder", "tasks", f"--out={tmp_path / 'x'}", "extra")
    one_line(rc, err, "unexpected arguments")
    assert not (tmp_path / "x").exists()
    built = tmp_path / "tasks"
    for _ in range(2):  # new, then its own earlier build
        rc, out, err = run_module("encoder", "tasks", f"--out={built}")
        assert rc == 0, err
    assert json.loads(out)["topic"]["train"] > 0
    assert errors.read_marker(str(built))["kind"] == "tasks"


def test_bench_topology_mistake_is_one_line():
    pytest.importorskip("libtpu")
    rc, _, err = run_module("encoder", "bench", "--mode=compile",
                            "--config=experiments/pretrain.py:runlocal", "--topology=bogus")
    one_line(rc, err, "--topology=bogus: ", "e.g. v5e:2x2")


def test_hf_bert_checks_its_out_first_and_may_replace_its_own_import(tmp_path):
    rc, _, err = run_module("encoder", "import_hf", f"--checkpoint={tmp_path / 'nope'}",
                            f"--out={tmp_path / 'o'}")
    one_line(rc, err, "no config.json")
    assert err.strip().startswith("error: ")
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    rc, _, err = run_module("encoder", "import_hf", f"--checkpoint={minilm_dir()}",
                            f"--out={user}")
    one_line(rc, err, "did not write")
    assert sorted(os.listdir(user)) == ["notes.txt"]
    out = tmp_path / "imported"
    errors.mark_output(str(out), "import")  # an earlier import (refused before: "not empty")
    (out / "model_config.json").write_text("{}")
    rc, _, err = run_module("encoder", "import_hf", f"--checkpoint={minilm_dir()}",
                            f"--out={out}")
    assert rc == 0, err
    assert store.is_params_folder(str(out)) and (out / "tokenizer").is_dir()
    assert json.loads((out / "model_config.json").read_text())["hidden_size"] == 384


def test_suite_grid_mistakes_are_refused_before_data_and_leave_no_folder(tiny_pretrained,
                                                                         tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "t")
    (tasks / "t" / "task.json").write_text('{"type": "classification"}')
    wd = tmp_path / "suite"
    rc, _, err = run_module("encoder", "suite", f"--init_from={tiny_pretrained}",
                            "--learning_rates=-1e-3", f"--workdir={wd}")
    one_line(rc, err, "--learning_rates", "a finite number > 0")
    assert not wd.exists()  # the embedded tasks were not even built
    rc, _, err = run_module("encoder", "suite", f"--init_from={tiny_pretrained}",
                            f"--tasks={tasks}", "--finetune_set=finetune.bogus=1",
                            f"--workdir={wd}")
    one_line(rc, err, "field 'finetune.bogus': no 'bogus' in the config")
    assert not wd.exists()


def test_probe_is_quiet_by_default(tiny_pretrained, tmp_path):
    """orbax's INFO lines (one per file read) once buried the probe's result."""
    from helpers import run_module, topic_task
    tasks = topic_task(tmp_path / "tasks" / "topic", n_train=16, n_dev=8)
    rc, out, err = run_module("encoder", "probe", f"--init_from={tiny_pretrained}",
                              f"--tasks={tasks}", f"--out={tmp_path / 'p'}", "--max_train=16")
    assert rc == 0, err[-2000:]
    assert "checkpoint.py" not in err and " INFO " not in err and not err.startswith("I1"), err
    assert (tmp_path / "p" / "probes.json").exists()
