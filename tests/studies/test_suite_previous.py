"""A suite folder's report is kept as suite.previous.json, with a line, whenever the model, its
step, the method or the tasks change (a rerun of the same once overwrote the last silently)."""
import json
import os

from encoder.eval import identity
from encoder.studies.suite import battery
from encoder.tasks import catalog
from helpers import minilm_dir, topic_task

RULE = "glue"  # the default preset's average rule


def _tasks(root, *names):
    for n in names:
        topic_task(root / n, n_train=16, n_dev=8)
    return catalog.discover(str(root))[0]


def _report(root, tasks, source, header_source="m"):
    return battery.write_report(str(root), tasks, [], RULE, {"source": header_source}, [],
                                [], None, "run(s)", {"source": source, "data": {}})


def test_another_model_keeps_the_previous_report_and_says_so(tmp_path, tiny_pretrained,
                                                             capsys):
    tasks = _tasks(tmp_path / "tasks", "topic")
    out = tmp_path / "out"
    out.mkdir()
    first = identity.source_identity(tiny_pretrained)
    _report(out, tasks, first)
    _report(out, tasks, first)  # the same model again: nothing to keep, nothing said
    assert not (out / battery.PREVIOUS).exists()
    assert "suite.previous.json" not in capsys.readouterr().out
    other = identity.source_identity("hf:" + minilm_dir())
    _report(out, tasks, other)
    said = capsys.readouterr().out
    assert f"model: {identity.describe(first)} -> {identity.describe(other)}" in said
    kept = json.loads((out / battery.PREVIOUS).read_text())
    assert kept["identity"]["source"] == first
    assert json.loads((out / "suite.json").read_text())["identity"]["source"] == other


def test_another_step_of_the_same_workdir_is_another_model(tmp_path, tiny_pretrained):
    tasks = _tasks(tmp_path / "tasks", "topic")
    now = identity.source_identity(tiny_pretrained)
    earlier = {**now, "step": now["step"] - 2, "sha256": "0" * 16}
    (tmp_path / "out").mkdir()
    _report(tmp_path / "out", tasks, earlier)
    changes = battery.report_changes(str(tmp_path / "out"), tasks, {}, {"source": now})
    assert changes == [f"model: {identity.describe(earlier)} -> {identity.describe(now)}"]


def test_other_tasks_or_another_baseline_keep_the_previous_report(tmp_path, capsys):
    tasks = _tasks(tmp_path / "tasks", "alpha", "beta")
    out = tmp_path / "out"
    opts = battery.SuiteOptions("", str(out), tasks=str(tmp_path / "tasks"), baseline="bow")
    battery.run_suite(opts)
    assert not (out / battery.PREVIOUS).exists()
    battery.run_suite(battery.SuiteOptions("", str(out), tasks=str(tmp_path / "tasks"),
                                           baseline="majority"))
    said = capsys.readouterr().out
    assert "model: baseline:bow (no model) -> baseline:majority (no model)" in said
    assert json.loads((out / battery.PREVIOUS).read_text())["header"]["source"].startswith(
        "baseline:bow")
    battery.run_suite(battery.SuiteOptions("", str(out), tasks=str(tmp_path / "tasks"),
                                           baseline="majority", only=("alpha",)))
    assert "tasks: -beta" in capsys.readouterr().out
    assert [t.name for t in tasks] == ["alpha", "beta"]
    assert os.path.exists(out / "suite.json")
