"""The downstream suite: GLUE's exact layouts, metrics by hand, the learning-rate choice,
the embedded battery, resume without repeats, failures reported, one run end to end."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from encoder.data import stdlib_tasks
from encoder.studies import records
from encoder.studies.suite import battery, catalog
from helpers import ROOT, topic_task

# --------------------------------------------------------------------------- GLUE files

MNLI_TRAIN = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
              "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label")
MNLI_DEV = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
            "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\t"
            "label4\tlabel5\tgold_label")
STSB = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def _mnli_row(i, a, b, label, dev=False):
    labels = [label] * (5 if dev else 1)
    return "\t".join([str(i), "31193", "31193n", "government", "( ( x ) )", "( y )", "(ROOT x)",
                      "(ROOT y)", a, b, *labels, label])


def write_glue(root) -> str:
    """Every GLUE task in its download layout (headers, BOM, header-less CoLA, MNLI's two
    dev sets, STS-B floats, a short QQP row), two or three rows a file."""
    files = {
        "CoLA/train.tsv": "gj04\t1\t\tOur friends won't buy this analysis.\n"
                          "gj04\t0\t*\tThey drank the pub.\n",
        "CoLA/dev.tsv": "gj04\t1\t\tThe sailors rode the breeze.\n",
        "CoLA/test.tsv": "index\tsentence\n0\tBill whistled past the house.\n",
        "SST-2/train.tsv": "sentence\tlabel\nhide new secretions \t0\ngreat fun \t1\n",
        "SST-2/dev.tsv": "sentence\tlabel\nit 's a charming journey . \t1\n",
        "MRPC/train.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                          "1\t702876\t702977\tAmrozi accused him .\tHe accused Amrozi .\n"
                          "0\t2108705\t2108831\tYucaipa owned it .\tYucaipa bought it .\n",
        "MRPC/dev.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                        "1\t1355540\t1355592\tHe said so .\tHe told us so .\n",
        "QQP/train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                         "133273\t213221\t213222\tHow is the life?\tHow is life?\t1\n"
                         "402555\t536040\t536041\tHow do I learn?\n"
                         "360472\t364011\t490273\tWhat is X?\tWho is Y?\t0\n",
        "QQP/dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                       "1\t2\t3\tWhy is the sky blue?\tWhy blue sky?\t1\n",
        "STS-B/train.tsv": f"{STSB}\n0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\t"
                           "A plane is taking off.\tAn air plane is taking off.\t5.000\n"
                           f"1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man plays."
                           "\tA dog runs.\t0.500\n",
        "STS-B/dev.tsv": f"{STSB}\n0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\t"
                         "A man with a hard hat.\tA man wearing a hard hat.\t4.750\n",
        "MNLI/train.tsv": MNLI_TRAIN + "\n" + _mnli_row(0, "Conceptually cream.", "Cream is.",
                                                        "neutral") + "\n" +
                          _mnli_row(1, "You know.", "You do not.", "contradiction") + "\n",
        "MNLI/dev_matched.tsv": MNLI_DEV + "\n" + _mnli_row(0, "The new rights.", "Rights.",
                                                            "entailment", dev=True) + "\n",
        "MNLI/dev_mismatched.tsv": MNLI_DEV + "\n" + _mnli_row(0, "Your gift.", "A gift.",
                                                               "neutral", dev=True) + "\n",
        "QNLI/train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen?\tIn 1990.\tentailment\n"
                          "1\tWho?\tNobody knows.\tnot_entailment\n",
        "QNLI/dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhere?\tIn Paris.\tentailment\n",
        "RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo war.\tWar.\tnot_entailment\n"
                         "1\tA cat sat.\tA cat.\tentailment\n",
        "RTE/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana won.\tDana.\tentailment\n",
        "WNLI/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tIt had.\t1\n"
                          "1\tJohn saw Bill.\tBill saw.\t0\n",
        "WNLI/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tIt is.\t0\n",
        "diagnostic/diagnostic.tsv": "index\tsentence1\tsentence2\n0\ta\tb\n",
    }
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return str(root)


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _glue_tasks(tmp_path):
    tasks, _ = catalog.discover(write_glue(tmp_path / "glue"))
    return {t.name: t for t in tasks}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    return battery.embedded_tasks(str(tmp_path_factory.mktemp("suite")))


def _env():
    return {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}


def test_the_embedded_suite_end_to_end(embedded, tiny_pretrained, tmp_path):
    out = tmp_path / "out"
    opts = battery.SuiteOptions(init_from=tiny_pretrained, workdir=str(out), tasks=embedded,
                                preset="runlocal", max_train=32, max_eval=16, parallel=2,
                                probe=True, probe_max_train=32, env=_env())
    result = battery.run_suite(opts)
    assert result["failed"] == 0
    names = set(stdlib_tasks.TASK_META)
    assert {s["task"] for s in result["tasks"]} == names and not result["missing"]
    assert all(math.isfinite(s["median"]) for s in result["tasks"])
    assert math.isfinite(result["averages"]["average"])
    with open(out / "suite.csv") as f:
        lines = f.read().splitlines()
    assert {line.split(",")[0] for line in lines[1:]} >= names | {"average"}
    text = (out / "suite.md").read_text()
    assert "**average** (7 tasks)" in text and "Per-layer linear probes" in text
    assert (out / "suite.png").stat().st_size > 0 and (out / "probes" / "probes.png").exists()
    for task in ("topic", "same_package", "relatedness", "arg_mentions", "api_qa"):
        assert (out / "runs" / task / "0.001" / "0" / "eval.json").exists()
    assert battery.suite_average(str(out))["suite/average"] == pytest.approx(
        result["averages"]["average"])


def test_an_interrupted_suite_repeats_no_finished_run(tiny_pretrained, tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=32, n_dev=16)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "encoder.suite", f"--init_from={tiny_pretrained}",
           f"--tasks={tasks}", f"--workdir={out}", "--preset=runlocal", "--seeds=2"]
    first = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    done = out / "runs" / "topic" / "0.001" / "0" / "eval.json"
    deadline = time.time() + 300
    while not done.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert done.exists(), first.communicate()[0][-3000:]
    first.send_signal(signal.SIGINT)  # Ctrl-C while seed 1 runs: it is stopped, not finished
    first.communicate(timeout=180)
    # seed 1 can (rarely, on a quiet machine) finish before the Ctrl-C lands: then it too
    # must be skipped, else it must be started again
    seed1_finished = (out / "runs" / "topic" / "0.001" / "1" / "eval.json").exists()
    mtime = done.stat().st_mtime_ns
    second = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    log = second.stdout + second.stderr
    assert "skip topic/0.001/0 (finished)" in log and "started topic/0.001/0" not in log
    assert ("skip topic/0.001/1 (finished)" if seed1_finished else "started topic/0.001/1") in log
    assert done.stat().st_mtime_ns == mtime  # the finished run was not repeated
    with open(out / "suite.json") as f:
        assert json.load(f)["tasks"][0]["seeds"] == 2


def test_a_failed_run_is_reported_with_its_log(tiny_pretrained, tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=8, n_dev=8)  # fewer rows than one batch of 16
    opts = battery.SuiteOptions(init_from=tiny_pretrained, workdir=str(tmp_path / "out"),
                                tasks=str(tasks), preset="runlocal", env=_env())
    result = battery.run_suite(opts)
    assert result["failed"] == 1 and result["missing"] == ["topic"]
    log = str(tmp_path / "out" / "runs" / "topic" / "0.001" / "0" / records.LOG)
    assert log in result["failures"][0] and "exit 1" in result["failures"][0]
    assert "fewer than one batch" in open(log).read()
    assert log in (tmp_path / "out" / "suite.md").read_text()
