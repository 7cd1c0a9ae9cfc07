"""Every score carries its identity: a source's checkpoint step and content hash,
its data files' hashes, recorded with every run of a study; a done run whose model or data
changed at the same path is stale (moved aside and rerun), never reused. The reported case:
the suite skipped `topic/0.001/0 (finished)` after its source trained on from step 20 to
60, and reported the step-20 scores as the model's."""
import json
import os
import shutil

import pytest

from encoder.eval import identity
from encoder.studies import records, runner
from encoder.studies.suite import report


def fake_workdir(path, steps=(20,)):
    """A pretraining workdir's files (what identity reads: config, run record, checkpoint
    folders, tokenizer), without a model."""
    os.makedirs(os.path.join(path, "tokenizer"), exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model": {"hidden_size": 8}, "data": {}}, f)
    with open(os.path.join(path, "run.json"), "w") as f:
        json.dump({"config": {"seed": 0}, "data": {}}, f)
    with open(os.path.join(path, "tokenizer", "sp.model"), "wb") as f:
        f.write(b"pieces")
    for s in steps:
        add_step(path, s)
    return str(path)


def add_step(path, step, content=None):
    d = os.path.join(path, "checkpoints", str(step), "state")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "params"), "wb") as f:
        f.write(content or f"weights at {step}".encode())


def test_a_workdir_is_named_by_its_newest_step_and_content(tmp_path):
    w = fake_workdir(tmp_path / "w")
    a = identity.source_identity(w)
    assert (a["kind"], a["step"], len(a["sha256"])) == ("pretraining", 20, 16)
    assert a["run"] and identity.source_identity(w, step=20) == a
    add_step(w, 60)  # trained on
    b = identity.source_identity(w)
    assert b["step"] == 60 and b["sha256"] != a["sha256"]
    assert identity.changes({"source": a}, {"source": b}) == [
        f"source: step 20 -> 60 (the model at {w} changed since this run)"]
    # the same step rewritten (another run in the folder): its content names it
    shutil.rmtree(os.path.join(w, "checkpoints", "60"))
    add_step(w, 60, b"other weights")
    c = identity.source_identity(w)
    assert c["step"] == 60 and not identity.same_source(b, c)
    assert identity.changes({"source": b}, {"source": c})[0].startswith(
        "source: its content changed (sha256 ")
    with pytest.raises(FileNotFoundError, match="no checkpoint at step 7"):
        identity.source_identity(w, step=7)
    assert "w step 60 (pretraining workdir, sha256 " in identity.describe(c)


def test_params_and_hf_folders_are_named_by_a_content_hash(tmp_path):
    p = tmp_path / "p"
    (p / "params").mkdir(parents=True)
    (p / "model_config.json").write_text("{}")
    (p / "params" / "a").write_bytes(b"1234")
    (p / ".encoder-output.json").write_text('{"updated": 1}')  # hidden: not the model
    a = identity.source_identity(str(p))
    assert (a["kind"], a["step"]) == ("params", None)
    copy = tmp_path / "copy"
    shutil.copytree(p, copy)
    (copy / ".encoder-output.json").write_text('{"updated": 2}')
    assert identity.source_identity(str(copy))["sha256"] == a["sha256"]  # same bytes
    (p / "params" / "a").write_bytes(b"1235")
    assert identity.source_identity(str(p))["sha256"] != a["sha256"]
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"w")
    h = identity.source_identity(f"hf:{hf}")
    (hf / "model.safetensors").write_bytes(b"v")
    assert h["kind"] == "hf" and identity.source_identity(f"hf:{hf}")["sha256"] != h["sha256"]


def test_a_hash_cache_rereads_only_changed_files(tmp_path):
    f = tmp_path / "data.jsonl"
    f.write_text("one\n")
    cache = identity.HashCache(str(tmp_path / "hashes.json"))
    first = cache.sha256(str(f))
    cache.save()
    again = identity.HashCache(str(tmp_path / "hashes.json"))
    assert again.entries[str(f)][2] == first
    f.write_text("two\n")  # a new size: hashed again
    assert again.sha256(str(f)) != first


def _done(workdir, inputs):
    run = runner.make_run("topic/0.001/0", workdir, {"x": 1}, inputs)
    assert runner.prepare(run, log=lambda *_: None)
    with open(os.path.join(workdir, "run.json"), "w") as f:
        json.dump({"config": {}, "finished": {"step": 4}}, f)
    assert run.status().state == "done"
    return run


def test_a_done_run_of_another_checkpoint_is_stale_and_moved_aside(tmp_path):
    w = fake_workdir(tmp_path / "w")
    task = tmp_path / "train.jsonl"
    task.write_text('{"text": "a", "label": "x"}\n')
    inputs = {"source": identity.source_identity(w),
              "data": identity.files_identity({"train": str(task)})}
    d = str(tmp_path / "runs" / "r")
    _done(d, inputs)
    assert records.read_inputs(d) == json.loads(json.dumps(inputs))
    add_step(w, 60)  # the reported case: the source trained on at the same path
    now = {**inputs, "source": identity.source_identity(w)}
    run = runner.make_run("topic/0.001/0", d, {"x": 1}, now)
    st = run.status()
    assert (st.state, st.cause) == ("stale", "inputs") and "step 20 -> 60" in st.detail
    said = []
    assert runner.prepare(run, log=said.append)  # rerun, not skipped
    assert said[0].startswith("rerunning topic/0.001/0: the model or data it ran on is not "
                              "what this study reads now (source: step 20 -> 60")
    assert records.read_inputs(d)["source"]["step"] == 60
    assert [p for p in os.listdir(tmp_path / "runs") if p.startswith("r.stale-")]
    # an edited task file at the same path: stale too
    _done(str(tmp_path / "runs" / "s"), now)
    task.write_text('{"text": "b", "label": "y"}\n')
    edited = {**now, "data": identity.files_identity({"train": str(task)})}
    st = runner.make_run("s", str(tmp_path / "runs" / "s"), {"x": 1}, edited).status()
    assert st.state == "stale" and f"data train: {task} changed" in st.detail


def test_a_done_run_without_a_record_is_not_reused_and_a_running_one_is_left(tmp_path):
    d = str(tmp_path / "legacy")
    legacy = runner.make_run("r", d, {"x": 1})  # planned before inputs were recorded
    runner.prepare(legacy, log=lambda *_: None)
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump({"config": {}, "finished": {"step": 4}}, f)
    inputs = {"source": {"kind": "params", "step": None, "sha256": "ab"}}
    st = runner.make_run("r", d, {"x": 1}, inputs).status()
    assert st == records.Status("stale", records.NO_INPUTS, "inputs")
    with open(os.path.join(d, "LOCK"), "w") as f:  # a live job holds it: never moved
        json.dump({"host": os.uname().nodename, "pid": os.getpid()}, f)
    assert runner.make_run("r", d, {"x": 1}, inputs).status().state != "stale"
    assert runner.make_run("r", d, {"x": 1}).status().state == "done"  # untracked: as before


def test_a_table_that_mixes_checkpoints_says_so(tmp_path):
    a = {"kind": "pretraining", "step": 20, "sha256": "aa", "init_from": "W"}
    b = {**a, "step": 60, "sha256": "bb"}
    rows = [{"task": "topic", "lr": 1e-3, "seed": s, "metrics": {"accuracy": 50.0},
             "score": 50.0, "dir": "d", "inputs": {"source": src, "data": {}}, "via": ""}
            for s, src in ((0, a), (1, b))]
    rows.append({**rows[0], "seed": 2, "inputs": {"source": {**a, "sha256": "cc"}},
                 "via": "MNLI"})  # an intermediate start: another model by design
    mixed = report.mixed_checkpoints(rows)
    assert mixed == {"step 20 sha256:aa": ["topic/0.001/0"],
                     "step 60 sha256:bb": ["topic/0.001/1"]}
    assert report.mixed_checkpoints(rows[:1] + rows[2:]) == {}
    text = report.markdown([], {}, {"checkpoint": identity.describe(b)}, [], [], [], None,
                           mixed)
    assert text.splitlines()[2].startswith("**WARNING: these rows scored different "
                                           "checkpoints of the source:** step 20 sha256:aa")
    path = tmp_path / "runs.csv"
    report.write_runs_csv(str(path), rows[:2])
    header, first, second = path.read_text().splitlines()
    assert header.split(",")[-3:] == ["checkpoint", "data", "dir"]
    assert "step 20 sha256:aa" in first and "step 60 sha256:bb" in second


def test_an_ablation_row_names_the_checkpoint_it_scored(tmp_path):
    """runs.csv carries each run's final checkpoint (step, content hash) and data hashes; a
    row that did not score its planned last step is named above the table."""
    from experiments import pretrain as pretrain_exp
    from encoder.studies import ablation
    config = pretrain_exp.get_config("runlocal")
    config.train.num_steps = 10
    d = tmp_path / "runs" / "r"
    fake_workdir(d, steps=(5, 10))
    (d / "config.json").write_text(config.to_json())  # a real config: its parameter count
    (d / "metrics.jsonl").write_text(json.dumps({"step": 10, "train/loss": 2.0,
                                                 "train/tokens_per_s": 1.0}) + "\n")
    records.write_inputs(str(d), {"data": {"train_files": {"path": "t", "sha256": "abc"}}})
    run = {"variant": "v", "seed": 0, "config": config, "dir": "r"}
    row = ablation.read_run(run, str(tmp_path))
    sha = identity.source_identity(str(d))["sha256"]
    assert (row["checkpoint"], row["checkpoint_step"]) == (f"step 10 sha256:{sha}", 10)
    assert row["data"] == "train_files:abc"
    ablation.write_results([row], str(tmp_path))
    with open(tmp_path / "runs.csv") as f:
        header, line = f.read().splitlines()
    assert header.endswith(",checkpoint,data") and line.endswith(f"step 10 sha256:{sha},"
                                                                 "train_files:abc")
    assert "WARNING" not in (tmp_path / "results.md").read_text()
    shutil.rmtree(d / "checkpoints" / "10")  # its last checkpoint gone: step 5 is scored
    ablation.write_results([ablation.read_run(run, str(tmp_path))], str(tmp_path))
    assert ("**WARNING: not every row scored its planned final step:** v seed 0: step 5 of "
            "10 planned") in (tmp_path / "results.md").read_text()


def test_a_pretraining_run_records_its_data_and_start(tmp_path):
    from experiments import pretrain as pretrain_exp
    from encoder.studies import ablation
    text = tmp_path / "corpus.txt"
    text.write_text("some text\n\nanother document\n")
    config = pretrain_exp.get_config("runlocal")
    config.data.train_files = str(text)
    config.init_from, config.init_step = fake_workdir(tmp_path / "stable", (4, 8)), 4
    inputs = ablation.pretraining_inputs(config)
    assert inputs["source"]["step"] == 4 and inputs["data"]["train_files"]["path"] == str(text)
    text.write_text("edited text\n")
    again = ablation.pretraining_inputs(config)
    assert identity.changes(inputs, again)[0].startswith(f"data train_files: {text} changed")


def test_a_pretraining_run_from_before_the_record_is_judged_by_its_own_data_record(tmp_path):
    from encoder.data import corpus
    text = tmp_path / "corpus.txt"
    text.write_text("some text\n")
    d = str(tmp_path / "r")
    runner.prepare(runner.make_run("r", d, {"x": 1}), log=lambda *_: None)
    with open(os.path.join(d, "run.json"), "w") as f:  # what the job recorded of its data
        json.dump({"config": {}, "data": {"data.train_files": corpus.fingerprint(str(text))},
                   "finished": {"step": 4}}, f)
    inputs = {"data": {"train_files": identity.corpus_identity(str(text))}}
    assert runner.make_run("r", d, {"x": 1}, inputs).status().state == "done"  # kept
    text.write_text("other text, longer\n")
    st = runner.make_run("r", d, {"x": 1}, {"data": {
        "train_files": identity.corpus_identity(str(text))}}).status()
    assert st.state == "stale" and st.detail.startswith(f"data train_files: file changed: ")
    # one that started from a model: its checkpoint is unknown, so it is rerun
    st = runner.make_run("r", d, {"x": 1}, {**inputs, "source": {"kind": "params"}}).status()
    assert st.detail == records.NO_INPUTS


def test_a_source_that_changes_while_the_suite_runs_fails_the_table(tmp_path, monkeypatch):
    """W trained on while its suite's runs ran: the children may have loaded either model,
    so the table says so and the command fails (the next start reruns the old runs)."""
    import types
    from encoder.checkpoints import sources
    from encoder.studies.suite import battery
    from helpers import topic_task
    w = fake_workdir(tmp_path / "W", steps=(20,))
    monkeypatch.setattr(sources, "load", lambda init_from: types.SimpleNamespace(
        model_cfg=types.SimpleNamespace(hidden_size=32)))
    planned = []

    def execute(runs, launcher, log=print):
        planned.extend(runs)
        add_step(w, 60)  # the source trains on meanwhile
        return [], []
    monkeypatch.setattr(runner, "execute", execute)
    topic_task(tmp_path / "tasks" / "topic", n_train=16, n_dev=8)
    result = battery.run_suite(battery.SuiteOptions(
        init_from=w, workdir=str(tmp_path / "out"), tasks=str(tmp_path / "tasks"),
        preset="runlocal"))
    assert planned and all(r.inputs["source"]["step"] == 20 for r in planned)
    assert result["failed"] == 1 and result["failures"][0].startswith(
        "the source changed while the suite ran (source: step 20 -> 60")
    assert result["identity"]["source"]["step"] == 20
    assert "CHANGED while the suite ran" in result["header"]["checkpoint"]
    assert set(result["identity"]["data"]["topic"]) == {"train", "dev"}


def test_a_workdir_at_a_step_is_that_checkpoint(tmp_path):
    w = fake_workdir(tmp_path / "w", steps=(20, 60))
    at = identity.source_identity(f"{w}@20")
    assert (at["init_from"], at["step"]) == (f"{w}@20", 20)
    assert at["sha256"] == identity.source_identity(w, step=20)["sha256"]
    assert identity.source_identity(w)["step"] == 60
    with pytest.raises(FileNotFoundError, match="no checkpoint at step 40"):
        identity.source_identity(f"{w}@40")
