"""The downstream suite: GLUE's exact layouts, metrics by hand, the learning-rate choice,
the embedded battery, resume without repeats, failures reported, one run end to end."""
import json
import math
import os
import types

import numpy as np
import ml_collections
import pytest

from encoder.retrieval import beir

from encoder.data import embedded_tasks
from encoder.tasks import readers as tasks_lib
from encoder.eval import metrics
from encoder.studies import records, runner
from encoder.studies.suite import battery, plan as plan_lib, presets, report
from encoder.tasks import catalog, embedding
from helpers import write_glue


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_every_glue_task_is_read_into_its_columns_labels_and_metrics(tmp_path):
    root = write_glue(tmp_path / "glue")
    tasks, notes = catalog.discover(root)
    assert [t.name for t in tasks] == ["CoLA", "SST-2", "MRPC", "QQP", "STS-B", "MNLI", "QNLI",
                                       "RTE", "WNLI"]
    assert len(notes) == 1 and "diagnostic" in notes[0]  # no train.tsv: not a task
    by = {t.name: t for t in tasks}
    assert {n: [m.name for m in t.metrics] for n, t in by.items()} == {
        "CoLA": ["mcc"], "SST-2": ["accuracy"], "MRPC": ["f1", "accuracy"],
        "QQP": ["f1", "accuracy"], "STS-B": ["pearson", "spearman"],
        "MNLI": ["accuracy_m", "accuracy_mm"], "QNLI": ["accuracy"], "RTE": ["accuracy"],
        "WNLI": ["accuracy"]}
    assert by["STS-B"].type == "regression" and by["MRPC"].positive == "1"
    prepared = {t.name: catalog.prepare(t, str(tmp_path / "data"), [0]) for t in tasks}
    first = {n: _read_jsonl(p.train[0])[0] for n, p in prepared.items()}
    assert first["CoLA"] == {"text": "Our friends won't buy this analysis.", "label": "1"}
    assert first["SST-2"] == {"text": "hide new secretions ", "label": "0"}
    assert first["MRPC"] == {"text_a": "Amrozi accused him .", "text_b": "He accused Amrozi .",
                             "label": "1"}  # the BOM did not hide the Quality column
    assert first["QQP"] == {"text_a": "How is the life?", "text_b": "How is life?", "label": "1"}
    assert first["STS-B"] == {"text_a": "A plane is taking off.",
                              "text_b": "An air plane is taking off.", "label": 5.0}
    assert first["MNLI"] == {"text_a": "Conceptually cream.", "text_b": "Cream is.",
                             "label": "neutral"}  # gold_label, not label1
    assert first["QNLI"] == {"text_a": "When?", "text_b": "In 1990.", "label": "entailment"}
    assert first["RTE"]["label"] == "not_entailment" and first["WNLI"]["label"] == "1"
    # QQP's short row is skipped and counted, never silently read
    assert prepared["QQP"].record["skipped"]["train"] == [f"{root}/QQP/train.tsv:3"]
    assert len(_read_jsonl(prepared["QQP"].train[0])) == 2
    # MNLI: matched is the dev file, mismatched the run's test file (eval.json's test)
    assert _read_jsonl(prepared["MNLI"].dev)[0]["text_a"] == "The new rights."
    assert _read_jsonl(prepared["MNLI"].test)[0]["label"] == "neutral"
    assert prepared["CoLA"].test == ""  # GLUE's unlabelled test.tsv is not a dev set


def test_glue_labels_and_columns_are_checked(tmp_path):
    root = write_glue(tmp_path / "glue")
    with open(os.path.join(root, "RTE", "dev.tsv"), "a") as f:
        f.write("1\tA.\tB.\tmaybe\n")
    rte = catalog.task_of(os.path.join(root, "RTE"))
    with pytest.raises(tasks_lib.TaskDataError, match=r"RTE/dev.tsv:3: label 'maybe' is not one "
                                                      "of RTE's labels"):
        catalog.read_split(rte, "dev")
    os.makedirs(tmp_path / "g2" / "SST-2")
    (tmp_path / "g2" / "SST-2" / "train.tsv").write_text(
        "index\tsentence1\tsentence2\tlabel\n0\ta\tb\t1\n")
    with pytest.raises(tasks_lib.TaskDataError, match="SST-2 expects one sentence"):
        catalog.read_split(catalog.task_of(str(tmp_path / "g2" / "SST-2")), "train")


# ------------------------------------------------------------------------- metrics

def test_metrics_match_hand_computed_values():
    # binary F1: tp 2, predicted positives 3, gold positives 3 -> P = R = F1 = 2/3
    assert metrics.binary_f1([1, 1, 0, 0, 1], [1, 0, 0, 1, 1], 1) == pytest.approx(2 / 3)
    assert metrics.binary_f1(["0", "1"], ["0", "0"], "1") == 0.0
    # MCC: TP 1, TN 2, FP 0, FN 1 -> (1*2 - 0*1) / sqrt(1 * 2 * 2 * 3)
    assert metrics.mcc([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(2 / math.sqrt(12))
    # Pearson: deviations (-1.5,-.5,.5,1.5) and (-1.5,.5,-.5,1.5): 4 / 5; ranks are the values
    assert metrics.pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert metrics.spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    # STS: cosines 1, 0.707, 0 (any norm), against gold ranks
    a, b = [[1, 0], [2, 0], [1, 0]], [[3, 0], [1, 1], [0, 5]]
    assert metrics.cosine_spearman(a, b, [5, 3, 1]) == pytest.approx(1.0)
    assert metrics.cosine_spearman(a, b, [0, 1, 2]) == pytest.approx(-1.0)
    # nDCG@10, graded: DCG = 0 + 1/log2(3) + 2/log2(4); IDCG = 2 + 1/log2(3) (beir.py's
    # trec_eval measures, which the suite scores retrieval with, on ranked id lists)
    def one(ranked, rel, ks=(10,)):
        return beir.query_measures(beir.run_from_rankings({"q": ranked})["q"], rel, ks)
    rel = {"d2": 1, "d3": 2}
    dcg, idcg = 1 / math.log2(3) + 1.0, 2.0 + 1 / math.log2(3)
    assert one(["d1", "d2", "d3"], rel)["ndcg_at_10"] == pytest.approx(dcg / idcg)
    assert one(["d3", "d2"], rel)["ndcg_at_10"] == pytest.approx(1.0)
    assert one([f"x{i}" for i in range(10)] + ["d3"], rel)["ndcg_at_10"] == 0.0  # past k
    assert one(["d1", "d2", "d3"], rel)["mrr_at_10"] == 0.5
    assert one([f"x{i}" for i in range(10)] + ["d2"], rel)["mrr_at_10"] == 0.0
    three = {"d2": 1, "d3": 1, "d9": 1}
    assert one(["d1", "d2", "d3"], three, (2, 3))["recall_at_2"] == pytest.approx(1 / 3)
    assert one(["d1", "d2", "d3"], three, (2, 3))["recall_at_3"] == pytest.approx(2 / 3)
    scores = beir.evaluate_run(beir.run_from_rankings(
        {"q1": ["d1", "d2"], "q2": ["d5", "d4"], "q3": ["d1"]}),
        {"q1": {"d1": 1}, "q2": {"d4": 1}, "q3": {"d1": 0}}, ks=(1, 2))
    assert scores["mrr_at_10"] == pytest.approx((1 + 0.5) / 2)  # q3 has nothing relevant
    assert scores["recall_at_1"] == pytest.approx(0.5) and scores["recall_at_2"] == 1.0
    assert scores["ndcg_at_10"] == pytest.approx((1 + 1 / math.log2(3)) / 2)
    assert scores["map"] == pytest.approx((1 + 0.5) / 2)
    # GLUE: each task's metrics averaged first: (50 + 85 + 87 + 83) / 4
    assert metrics.glue_score({"CoLA": {"mcc": 50}, "MRPC": {"f1": 90, "accuracy": 80},
                               "STS-B": {"pearson": 88, "spearman": 86},
                               "MNLI": {"m": 84, "mm": 82}}) == pytest.approx(76.25)


def test_retrieval_ranking_by_cosine():
    docs = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])  # [N, D] unit rows
    q = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert embedding.rank(q, docs, ["a", "b", "c"], 2) == [["b", "c"], ["a", "c"]]


# ------------------------------------------------------------ choosing and averaging

def _glue_tasks(tmp_path):
    tasks, _ = catalog.discover(write_glue(tmp_path / "glue"))
    return {t.name: t for t in tasks}


def test_median_over_seeds_picks_the_learning_rate(tmp_path):
    mrpc = _glue_tasks(tmp_path)["MRPC"]
    rows = []
    for lr, pairs in ((1e-5, [(80, 70), (60, 60), (90, 90)]),   # scores 75, 60, 90: median 75
                      (2e-5, [(85, 85), (61, 59), (84, 84)])):  # scores 85, 60, 84: median 84
        for seed, (f1, acc) in enumerate(pairs):
            rows.append({"lr": lr, "seed": seed, "metrics": {"f1": f1, "accuracy": acc}})
    s = report.summarize(mrpc, rows, "glue")
    assert s["lr"] == 2e-5 and s["median"] == 84 and s["seeds"] == 3
    assert (s["min"], s["max"]) == (60, 85)
    assert s["sd"] == pytest.approx(np.std([85, 60, 84], ddof=1))
    assert s["metrics"] == {"f1": 84, "accuracy": 84}
    assert s["per_lr"] == {"1e-05": 75, "2e-05": 84}
    # ELECTRA's rule scores MRPC by accuracy alone
    e = report.summarize(mrpc, rows, "electra")
    assert e["score_metrics"] == ["accuracy"]
    # ties go to the grid's first rate; a NaN median is never chosen
    tie = [{"lr": 3e-5, "seed": 0, "metrics": {"f1": 50, "accuracy": 50}},
           {"lr": 1e-5, "seed": 0, "metrics": {"f1": 50, "accuracy": 50}},
           {"lr": 5e-5, "seed": 0, "metrics": {"f1": float("nan"), "accuracy": 99}}]
    assert report.summarize(mrpc, tie, "glue")["lr"] == 3e-5


def test_a_retrievers_matryoshka_dims_join_its_metrics():
    task = types.SimpleNamespace(name="api_retrieval", kind="retrieval", type="retrieval",
                                 glue=False, score_metrics=("ndcg_at_10",),
                                 metrics=[types.SimpleNamespace(name="ndcg_at_10")])
    rows = [{"lr": None, "seed": 0, "metrics": {"ndcg_at_10": 13.5, "ndcg_at_10_dim64": 12.2,
                                                "ndcg_at_10_dim128": 13.0}}]
    s = report.summarize(task, rows, "glue")
    assert list(s["metrics"]) == ["ndcg_at_10", "ndcg_at_10_dim128", "ndcg_at_10_dim64"]
    assert s["median"] == 13.5  # the score stays the full width's


def test_averages_follow_the_rule(tmp_path):
    t = _glue_tasks(tmp_path)
    rows = {"CoLA": {"mcc": 50}, "MRPC": {"f1": 90, "accuracy": 80},
            "WNLI": {"accuracy": 20}}
    summaries = [report.summarize(t[n], [{"lr": 1e-5, "seed": 0, "metrics": m}], "glue")
                 for n, m in rows.items()]
    glue = report.averages(summaries, "glue")
    assert glue["glue"] == pytest.approx((50 + 85 + 20) / 3) and glue["average"] == glue["glue"]
    electra = [report.summarize(t[n], [{"lr": 1e-5, "seed": 0, "metrics": m}], "electra")
               for n, m in rows.items()]
    avg = report.averages(electra, "electra")
    assert avg["glue"] == pytest.approx((50 + 80) / 2)  # MRPC by accuracy; WNLI left out
    assert avg["glue_tasks"] == ["CoLA", "MRPC"]


def test_presets_resolve_by_width_and_name_their_fields():
    small = presets.resolve("electra", 256)
    assert small["learning_rates"] == (3e-4,) and small["layer_decay"] == 0.8
    large = presets.resolve("electra", 1024)
    assert large["learning_rates"] == (5e-5,) and large["layer_decay"] == 0.9
    assert presets.epochs_for(large, "RTE", "classification") == 10
    assert presets.epochs_for(large, "SST-2", "classification") == 3
    assert presets.seq_len_for(large, "qa") == 512
    assert presets.resolve("default", 128, {"seeds": 2, "learning_rates": None})["seeds"] == 2
    with pytest.raises(ValueError, match="valid names: bert, default, electra"):
        presets.resolve("glue", 128)
    for name in presets.PRESETS:  # every preset resolves at every width
        for width in (128, 768, 4096):
            presets.resolve(name, width)


# --------------------------------------------------------------- the embedded battery

@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    return battery.embedded_tasks(str(tmp_path_factory.mktemp("suite")))


def test_the_embedded_suite_builds_every_task_type(embedded, tmp_path):
    tasks, notes = catalog.discover(embedded)
    assert not notes
    kinds = {(t.kind, t.type) for t in tasks}
    assert kinds == {("finetune", "classification"), ("finetune", "regression"),
                     ("finetune", "tagging"), ("finetune", "qa"), ("sts", "sts"),
                     ("retrieval", "retrieval")}
    by = {t.name: t for t in tasks}
    assert set(by) == set(embedded_tasks.TASK_META)
    single = catalog.read_split(by["topic"], "train")[0][0]
    pair = catalog.read_split(by["same_package"], "train")[0][0]
    assert "text" in single and {"text_a", "text_b"} <= set(pair)
    scores = {ex["label"] for ex in catalog.read_split(by["relatedness"], "dev")[0]}
    assert scores == {0.0, 1.5, 3.0, 5.0}
    tagged = catalog.read_split(by["arg_mentions"], "dev")[0]
    assert all("B-ARG" in ex["tags"] for ex in tagged)
    for ex in catalog.read_split(by["api_qa"], "dev")[0]:
        assert ex["context"][ex["answer_start"]:].startswith(ex["answer_text"])
    assert len(embedding.read_sts(by["sts_relatedness"].files["test"])) == 400
    corpus, queries, qrels = embedding.read_retrieval(by["api_retrieval"].files, max_eval=10)
    assert len(queries) == 10 and all(d in {c["_id"] for c in corpus}
                                      for rel in qrels.values() for d in rel)
    # deterministic: the splits of a second build are the same bytes (the parse is one per
    # process, in sorted-walk order; the builders and their seeds run again)
    again = tmp_path / "again"
    embedded_tasks.write_task(str(again), "relatedness", embedded_tasks.relatedness_task(
        embedded_tasks.documented_functions()), lambda e: e["text_a"] + e["text_b"])
    for split in ("train", "dev", "test"):
        with open(again / "relatedness" / f"{split}.jsonl") as f1, \
                open(os.path.join(embedded, "relatedness", f"{split}.jsonl")) as f2:
            assert f1.read() == f2.read()


def test_a_changed_run_is_moved_aside_not_reused(tmp_path):
    run = runner.make_run("t", str(tmp_path / "r"), {"a": 1})
    assert runner.prepare(run, log=lambda *_: None)
    records.write_exit(run.workdir, 0)
    (tmp_path / "r" / "run.json").write_text('{"config": {}, "finished": {"step": 1}}')
    assert plan_lib.done(run)
    assert not runner.prepare(run, log=lambda *_: None)  # done: nothing to start
    changed = runner.make_run("t", str(tmp_path / "r"), {"a": 2})
    assert not plan_lib.done(changed) and changed.status().state == "stale"
    runner.prepare(changed, log=lambda *_: None)
    assert [p.name.startswith("r.stale-") for p in tmp_path.iterdir()].count(True) == 1
    assert not (tmp_path / "r" / "run.json").exists()


def test_intermediate_runs_start_from_the_chosen_mnli_run(tmp_path):
    run = runner.make_run("RTE/1e-05/1", "x", {"init_from": "src", "finetune": {
        "random_init": True}, "seed": 1}, task="RTE", lr=1e-5, seed=1, after="MNLI")
    moved = plan_lib.with_init_from(run, "/mnli/run")
    assert moved.config == {"init_from": "/mnli/run", "finetune": {"random_init": False},
                            "seed": 1}
    assert run.config["init_from"] == "src"  # the planned run is untouched
    opts = battery.SuiteOptions(init_from="x", workdir="y", intermediate="on")
    assert battery.intermediate_plan(opts, presets.resolve("default", 128),
                                     ["MNLI", "RTE", "CoLA"]) == {"RTE": "MNLI"}
    assert battery.intermediate_plan(battery.SuiteOptions("x", "y"),
                                     presets.resolve("roberta", 768), ["RTE"]) == {}


def test_ablate_plans_a_suite_job_per_pretraining_run(tmp_path, tiny_pretrained):
    from encoder.jobs import suite as suite_job
    from encoder.studies import ablation as ablate
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "runs"))
    for name in ("pos=rope__seed0", "a"):  # two finished pretraining runs
        os.symlink(tiny_pretrained, os.path.join(root, "runs", name))
    run, = ablate.suite_runs([{"dir": "pos=rope__seed0"}], root, "embedded",
                             ["--preset=runlocal"])
    d = os.path.join(root, "runs", "pos=rope__seed0")
    assert run.name == "pos=rope__seed0/suite" and run.workdir == os.path.join(d, "suite_job")
    assert run.config["mode"] == "suite"  # an `encoder run` job: every launcher starts it
    assert run.inputs["source"]["init_from"] == d  # trained on since: the suite reruns
    assert run.inputs["source"]["step"] == 6
    cmd = suite_job.command(ml_collections.ConfigDict(run.config).suite)
    assert cmd[1:4] == ["-m", "encoder", "suite"] and cmd[-1] == "--preset=runlocal"
    assert f"--init_from={d}" in cmd and f"--workdir={d}/suite" in cmd
    # embedded: built once for the whole study, every suite and watcher reads it
    assert f"--tasks={root}/tasks" in cmd and os.path.isfile(os.path.join(root, "tasks",
                                                                        "built.json"))
    glue, = ablate.suite_runs([{"dir": "a"}], root, "/glue", [])
    assert "--tasks=/glue" in glue.config["suite"]["args"]
    assert ablate.primary_metric([{"suite/average": 1.0, "eval/loss": 2.0}]) == "suite/average"
