"""The suite's baseline rows (python -m encoder suite --baseline=bow): every task type
through the suite's own files and report, the few-shot draws of the model's runs, GLUE's
layout, and the refusals (each method by hand: tests/tasks/test_baselines.py)."""
import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from encoder.eval import metrics
from encoder.tasks import classification
from encoder.studies.suite import battery
from encoder.tasks import catalog
from helpers import ROOT, topic_task, write_glue
from toy_tasks import RETRIEVAL, every_type, suite_csv


def test_the_bow_row_scores_every_task_type(tmp_path):
    tasks = every_type(tmp_path / "tasks")
    out = tmp_path / "out"
    result = battery.run_suite(battery.SuiteOptions("", str(out), tasks=tasks, baseline="bow"))
    assert result["failed"] == 0 and not result["missing"]
    rows = suite_csv(out / "suite.csv")
    by = {s["task"]: s for s in result["tasks"]}
    assert set(by) == {"topic", "pairs", "scores", "tags", "qa", "sts", "search"}
    assert by["topic"]["median"] == 100.0           # the word "file" decides the label
    assert by["scores"]["metrics"]["pearson"] == pytest.approx(100.0)
    assert by["scores"]["metrics"]["spearman"] == pytest.approx(100.0)
    assert by["tags"]["median"] == pytest.approx(100 / 3)
    assert by["qa"]["metrics"] == pytest.approx({"exact_match": 50.0, "f1": (100 + 200 / 3) / 2})
    assert by["qa"]["median"] == pytest.approx((50 + (100 + 200 / 3) / 2) / 2)
    assert by["sts"]["median"] == pytest.approx(-50.0)
    assert by["search"]["metrics"] == pytest.approx({k: 100 * v for k, v in RETRIEVAL.items()})
    for name, s in by.items():  # the csv carries the same numbers, and no learning rate
        assert float(rows[name]["median"]) == pytest.approx(s["median"], abs=1e-4)
        assert rows[name]["lr"] == "" and s["seeds"] == 1
    assert {by[n]["kind"] for n in ("sts", "search")} == {"sts", "retrieval"}
    avg = result["averages"]
    assert avg["average"] == pytest.approx(np.mean([s["median"] for s in by.values()]))
    assert avg["embedding_tasks"] == ["search", "sts"]
    # files of a model's run, read back by the suite's reader
    run = out / "runs" / "tags" / "bow" / "0"
    assert json.loads((run / "eval.json").read_text())["dev"]["entity_f1"] == pytest.approx(1 / 3)
    assert (run / "predictions.jsonl").read_text().count('"split": "dev"') == 1
    text = (out / "suite.md").read_text()
    assert "baseline:bow" in text and "**average** (7 tasks)" in text
    assert (out / "suite.png").stat().st_size > 0
    assert battery.suite_average(str(out))["suite/average"] == pytest.approx(avg["average"])
    # majority: constants, and no row for the types a constant cannot score
    maj = battery.run_suite(battery.SuiteOptions("", str(tmp_path / "maj"), tasks=tasks,
                                                 baseline="majority"))
    assert {s["task"] for s in maj["tasks"]} == {"topic", "pairs", "tags", "qa"}
    assert not maj["missing"] and maj["failed"] == 0
    assert "scores: no majority baseline for regression" in (
        tmp_path / "maj" / "suite.md").read_text()
    # bm25: the retrieval task alone, ranked as the hand values say (q1's every word is in
    # d2; q2's in no document, so the tie keeps corpus order and d3 comes third)
    b = battery.run_suite(battery.SuiteOptions("", str(tmp_path / "bm25"), tasks=tasks,
                                               baseline="bm25"))
    assert [s["task"] for s in b["tasks"]] == ["search"] and b["failed"] == 0
    assert b["tasks"][0]["metrics"] == pytest.approx({k: 100 * v for k, v in RETRIEVAL.items()})
    text = (tmp_path / "bm25" / "suite.md").read_text()
    assert "baseline:bm25" in text and "BM25 ranking" in text
    assert "sts: no bm25 baseline for sts tasks" in text


def test_few_shot_rows_use_the_model_runs_draws(tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=64, n_dev=32, seed=3)
    out = tmp_path / "out"
    result = battery.run_suite(battery.SuiteOptions("", str(out), tasks=str(tasks),
                                                    baseline="bow", train_per_class=2, seeds=3))
    s = result["tasks"][0]
    train = catalog.read_split(catalog.task_of(str(tasks / "topic")), "train")[0]
    dev = catalog.read_split(catalog.task_of(str(tasks / "topic")), "dev")[0]
    expected = []
    for seed in range(3):  # the draw a model's run of this seed trains on, made here again
        draw = catalog.per_class(train, 2, seed)
        with open(out / "data" / "topic" / f"train.seed{seed}.jsonl") as f:
            assert [json.loads(line)["text"] for line in f] == [ex["text"] for ex in draw]
        preds, = classification.bow_logistic_regression(draw, [dev])
        expected.append(100 * metrics.accuracy([ex["label"] for ex in dev],
                                               [p["label"] for p in preds]))
    assert s["seeds"] == 3 and s["median"] == pytest.approx(np.median(expected))
    assert (s["min"], s["max"]) == pytest.approx((min(expected), max(expected)))
    assert s["sd"] == pytest.approx(np.std(expected, ddof=1))
    with open(out / "runs.csv") as f:
        assert [r["seed"] for r in csv.DictReader(f)] == ["0", "1", "2"]


def test_glue_layout_rows_and_a_failed_task(tmp_path):
    out = tmp_path / "out"
    result = battery.run_suite(battery.SuiteOptions("", str(out),
                                                    tasks=write_glue(tmp_path / "glue"),
                                                    baseline="bow"))
    by = {s["task"]: s for s in result["tasks"]}
    # STS-B has one dev row: its correlation cannot be computed; reported, the rest go on
    assert result["failed"] == 1 and "STS-B/bow" in result["failures"][0]
    assert result["missing"] == ["STS-B"]
    assert set(by) == {"CoLA", "SST-2", "MRPC", "QQP", "MNLI", "QNLI", "RTE", "WNLI"}
    assert set(by["MNLI"]["metrics"]) == {"accuracy_m", "accuracy_mm"}
    # MRPC's one dev pair is positive: GLUE's F1 (from predictions.jsonl) equals accuracy
    assert by["MRPC"]["metrics"]["f1"] == by["MRPC"]["metrics"]["accuracy"] in (0.0, 100.0)
    assert math.isfinite(result["averages"]["glue"])


def test_a_baseline_refuses_a_model_and_keeps_a_models_report(tmp_path):
    with pytest.raises(ValueError, match="--init_from=runs/x has no meaning"):
        battery.run_suite(battery.SuiteOptions("runs/x", str(tmp_path / "a"), baseline="bow"))
    with pytest.raises(ValueError, match="only apply to a model's suite: --epochs, --probe"):
        battery.run_suite(battery.SuiteOptions("", str(tmp_path / "a"), baseline="bow",
                                               probe=True, epochs=3))
    with pytest.raises(ValueError, match="valid names: bm25, bow, majority"):
        battery.run_suite(battery.SuiteOptions("", str(tmp_path / "a"), baseline="bag"))
    assert not (tmp_path / "a").exists()
    model = tmp_path / "model"
    model.mkdir()
    (model / "suite.json").write_text(json.dumps({"header": {"source": "runs/tiny"}}))
    with pytest.raises(ValueError, match="holds a model's suite"):
        battery.run_suite(battery.SuiteOptions("", str(model), baseline="bow"))
    # the command line says so and exits non-zero, writing nothing
    proc = subprocess.run([sys.executable, "-m", "encoder", "suite", "--baseline=bow",
                           "--init_from=runs/x", f"--workdir={tmp_path / 'cli'}"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "has no meaning beside it" in proc.stderr
    assert not (tmp_path / "cli").exists()


def test_the_baseline_command_runs_from_the_command_line(tmp_path):
    """`python -m encoder suite --baseline=...` as the README types it (the CLI once passed
    the local launcher's options, which a baseline refuses as a model's option)."""
    tasks = every_type(tmp_path / "tasks")
    proc = subprocess.run([sys.executable, "-m", "encoder", "suite", "--baseline=bm25",
                           f"--tasks={tasks}", f"--workdir={tmp_path / 'out'}"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = suite_csv(tmp_path / "out" / "suite.csv")
    assert set(rows) - {"average", "embedding"} == {"search"}  # the one retrieval task
    assert float(rows["search"]["median"]) == pytest.approx(100 * RETRIEVAL["ndcg_at_10"])


def test_a_rerun_on_changed_task_files_says_so_and_keeps_the_old_report(tmp_path, capsys):
    """40 dev labels changed were once rescored silently."""
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=32, n_dev=16, seed=3)
    out = tmp_path / "out"
    opts = battery.SuiteOptions("", str(out), tasks=str(tasks), baseline="majority")
    battery.run_suite(opts)
    assert "rescoring" not in capsys.readouterr().out
    old = (out / "suite.json").read_text()
    battery.run_suite(opts)  # the same files: rescored, nothing to say
    assert "rescoring" not in capsys.readouterr().out
    dev = tasks / "topic" / "dev.jsonl"
    dev.write_text(dev.read_text().replace('"label": "', '"label": "x', 1))
    battery.run_suite(opts)
    said = capsys.readouterr().out
    assert f"rescoring: topic dev: {dev} changed (sha256 " in said, said
    assert json.loads((out / "suite.previous.json").read_text())["identity"] == \
        json.loads(old)["identity"]
