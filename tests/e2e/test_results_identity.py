"""Results that cannot mislead, through the commands as a user runs them: a
suite rerun after its model trained on reruns (it reported the step-20 scores as the
step-60 model's), BM25 on qrels naming documents the corpus lacks is refused (it reported
nDCG@10 0.00, exit 0), a repeated --sweep on one field and a second ablate on one study
folder are refused in one line, merge prints its result, not orbax's log."""
import json
import os
import re
import shutil

import jax
import pytest

from encoder.train import workdir as workdir_lib
from helpers import child_env, one_line, run_module, tiny_pretrain_config, topic_task

pytestmark = pytest.mark.e2e

ABSL_INFO = re.compile(r"^I\d{4} \d\d:\d\d:\d\d", re.M)


def _suite(w, tasks, out):
    return run_module("encoder", "suite", f"--init_from={w}", f"--tasks={tasks}", "--only=topic",
                      "--preset=runlocal", f"--workdir={out}", env=child_env(), timeout=600)


def test_a_suite_reruns_the_runs_of_a_model_that_trained_on(tiny_pretrained, tmp_path):
    from encoder.jobs import pretrain
    w = str(tmp_path / "W")
    shutil.copytree(tiny_pretrained, w, ignore=shutil.ignore_patterns("LOCK", "tensorboard"))
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=32, n_dev=16)
    out = tmp_path / "out"
    rc, stdout, err = _suite(w, tasks, out)
    assert rc == 0, stdout[-2000:] + err[-2000:]
    assert f"- checkpoint: {w} step 6 (pretraining workdir, sha256 " in stdout
    # W trains on, 6 -> 8 steps, at the same path
    pretrain.train(tiny_pretrain_config(num_steps=8, checkpoint_every=8), w,
                   devices=jax.devices()[:1])
    rc, stdout, err = _suite(w, tasks, out)
    assert rc == 0, stdout[-2000:] + err[-2000:]
    assert "skip topic/0.001/0 (finished)" not in stdout
    assert ("rerunning topic/0.001/0: the model or data it ran on is not what this study "
            "reads now (source: step 6 -> 8") in stdout
    with open(out / "suite.json") as f:
        saved = json.load(f)
    assert saved["identity"]["source"]["step"] == 8 and not saved["mixed_checkpoints"]
    assert saved["header"]["checkpoint"].startswith(f"{w} step 8 ")
    with open(out / "runs.csv") as f:
        assert "step 8 sha256:" in f.read()
    # unchanged now: the finished run is skipped again
    rc, stdout, _ = _suite(w, tasks, out)
    assert rc == 0 and "skip topic/0.001/0 (finished)" in stdout


def test_bm25_on_qrels_of_another_corpus_is_refused(tmp_path):
    task = tmp_path / "lookup"
    (task / "qrels").mkdir(parents=True)
    (task / "corpus.jsonl").write_text("".join(json.dumps(
        {"_id": f"d{i}", "title": "", "text": f"document {i} on topic {i}"}) + "\n"
        for i in range(8)))
    (task / "queries.jsonl").write_text("".join(json.dumps(
        {"_id": f"q{i}", "text": f"topic {i}"}) + "\n" for i in range(4)))
    qrels = task / "qrels" / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\tother-{i}\t1\n" for i in range(4)))  # the ids of another corpus
    out = tmp_path / "out"
    rc, _, err = run_module("encoder", "suite", "--baseline=bm25", f"--tasks={task}",
                            f"--workdir={out}", "--preset=runlocal")
    one_line(rc, err, f"{qrels}:2: 4 of 4 relevant judgements name documents absent from "
                      f"{task / 'corpus.jsonl'} (first: 'other-0')")
    assert not out.exists()


def test_ablate_refuses_a_repeated_sweep_and_a_busy_study_in_one_line(tmp_path):
    study = tmp_path / "study"
    rc, _, err = run_module("encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
                            "--sweep=model.position=rope", "--sweep=model.position=learned",
                            f"--workdir={study}")
    one_line(rc, err, "--sweep=model.position=... is given twice",
             "--sweep=model.position=rope,learned")
    assert not study.exists()
    with workdir_lib.Lock(str(study)):  # another ablate command on this folder, alive
        rc, _, err = run_module("encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
                                "--sweep=model.position=rope,learned", f"--workdir={study}")
        one_line(rc, err, f"{study} is in use by pid {os.getpid()}")
        assert os.listdir(study) == ["LOCK"]


def test_merge_prints_its_result_not_orbax_info(tiny_pretrained, tmp_path):
    out = tmp_path / "merged"
    rc, stdout, err = run_module("encoder", "merge", f"--workdirs={tiny_pretrained}",
                                 f"--out={out}")
    assert rc == 0, err[-2000:]
    assert not ABSL_INFO.search(err) and not ABSL_INFO.search(stdout), err[:2000]
    assert json.loads(stdout)["inputs"][0]["step"] == 6  # the result is all it prints
    rc, _, err = run_module("encoder", "merge", f"--workdirs={tiny_pretrained}",
                            f"--out={tmp_path / 'loud'}", "--verbosity=0")
    assert rc == 0 and ABSL_INFO.search(err)  # asked for: there


def test_a_fine_tuning_whose_source_was_trained_on_is_refused_not_resumed(tmp_path,
                                                                          tiny_pretrained):
    """A rerun once reported the old source's scores as the new one's."""
    from encoder.jobs import finetune, pretrain
    from helpers import topic_config
    src = str(tmp_path / "src")
    shutil.copytree(tiny_pretrained, src)
    task = topic_task(tmp_path / "topic")
    ft = str(tmp_path / "ft")
    config = topic_config(src, task, num_epochs=1)
    finetune.finetune(config, ft, devices=jax.devices()[:1])
    with open(os.path.join(ft, finetune.SOURCE)) as f:
        assert json.load(f)["step"] == 6
    pre = tiny_pretrain_config(num_steps=8, checkpoint_every=8)
    pretrain.train(pre, src, devices=jax.devices()[:1])  # the source trained on: step 8
    before = open(os.path.join(ft, "eval.json")).read()
    with pytest.raises(ValueError, match=r"not the model this run .* started from "
                                         r"\(source: step 6 -> 8"):
        finetune.finetune(config, ft, devices=jax.devices()[:1])
    assert open(os.path.join(ft, "eval.json")).read() == before  # nothing rewritten
