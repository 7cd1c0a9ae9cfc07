"""`encoder ablate` refuses what would drop or collide runs: a second --sweep on
one field (the first's values never ran), and a second command on one study folder (each
reported the other's runs as FAILED)."""
import os

import pytest

from encoder import errors
from encoder.studies import ablation
from encoder.train import workdir as workdir_lib


def _base():
    from experiments import pretrain as pretrain_exp
    return pretrain_exp.get_config("runlocal")


def test_a_second_sweep_on_one_field_is_refused_naming_it():
    sweeps = [ablation.parse_sweep("model.position=rope"),
              ablation.parse_sweep("model.position=learned")]
    with pytest.raises(errors.UsageError, match=r"model\.position=\.\.\. is given twice.*"
                                                r"--sweep=model\.position=rope,learned"):
        ablation.check_sweeps(sweeps, _base())
    # what used to happen: the product of the two had only `learned`
    assert [v["model.position"] for v in ablation.expand(sweeps, False)] == ["learned"]


def test_an_option_and_the_field_it_sets_are_one_field():
    base = _base()
    with pytest.raises(errors.UsageError, match=r"position=\.\.\. and --sweep=model\.position"
                                                r"=\.\.\. both set model\.position"):
        ablation.check_sweeps([ablation.parse_sweep("position=rope,alibi"),
                               ablation.parse_sweep("model.position=learned")], base)
    with pytest.raises(errors.UsageError, match="model.num_layers"):  # size sets the shape
        ablation.check_sweeps([ablation.parse_sweep("size=tiny,small"),
                               ablation.parse_sweep("model.num_layers=2,4")], base)
    # different fields combine as before
    ablation.check_sweeps([ablation.parse_sweep("model.position=rope,learned"),
                           ablation.parse_sweep("objective=mlm,rtd")], base)


def test_a_repeated_sweep_is_refused_before_the_folder_is_written(tmp_path):
    root = tmp_path / "study"
    study = ablation.Study(workdir=str(root), config=_base(),
                           sweeps=("model.position=rope", "model.position=learned"))
    with pytest.raises(errors.UsageError, match="given twice"):
        ablation.run_study(study, launcher=None)
    assert not root.exists()


def test_a_study_folder_in_use_is_refused_and_left_as_it_was(tmp_path):
    root = tmp_path / "study"
    study = ablation.Study(workdir=str(root), config=_base(), sweeps=("objective=mlm",))
    with workdir_lib.Lock(str(root)):  # another ablate command, alive, on this folder
        with pytest.raises(workdir_lib.WorkdirBusy, match=f"in use by pid {os.getpid()}"):
            ablation.run_study(study, launcher=None)
        assert sorted(os.listdir(root)) == ["LOCK"]  # no marker, no runs/ of the second
    assert os.listdir(root) == []  # released: the next command takes it


def test_objectives_are_ranked_only_on_a_metric_they_share(tmp_path):
    """An MLM/RTD study was once ranked on eval/mlm_accuracy, the generator's
    for RTD. Across objectives only a downstream score ranks; without one, no verdict."""
    def row(variant, seed, objective, **metrics):
        return {"variant": variant, "seed": seed, "dir": f"{variant}__seed{seed}",
                "objective": objective, "steps": 4, "checkpoint_step": 4,
                "final_train_loss": 5.0 + seed, "tokens_per_s": 1.0, "flops": 1e9,
                "parameters": 10, "curve": [(1, 6.0)], **metrics}
    rows = [row(f"objective={o}", s, o, **{"eval/mlm_accuracy": a + s / 100})
            for o, a in (("mlm", 0.3), ("rtd", 0.1)) for s in (0, 1)]
    assert ablation.primary_metric(rows) is None
    table = ablation.write_results(rows, str(tmp_path))
    text = (tmp_path / "results.md").read_text()
    assert "No ranking: the variants train different objectives (mlm, rtd)" in text
    assert "verdict" not in text and "best" not in [e.get("verdict") for e in table]
    # a declared downstream evaluator every run has ranks them (its loss-like figures never)
    for r, sts in zip(rows, (0.2, 0.22, 0.3, 0.31)):
        r.update({"evals/sts/cosine_spearman": sts, "evals/ho/loss": 1.0})
    assert ablation.primary_metric(rows) == "evals/sts/cosine_spearman"
    ablation.write_results(rows, str(tmp_path))
    assert "Primary metric: `evals/sts/cosine_spearman`" in (tmp_path / "results.md").read_text()
    # one objective: its own held-out figure as before
    assert ablation.primary_metric([r for r in rows if r["objective"] == "mlm"]) == \
        "evals/sts/cosine_spearman"
    plain = [{k: v for k, v in r.items() if not k.startswith("evals/")} for r in rows[:2]]
    assert ablation.primary_metric(plain) == "eval/mlm_accuracy"


def test_another_declared_evaluator_is_not_another_run(tmp_path):
    """config.evals changes what a run scores along the way, not the run: a study given
    another evaluator resumes its runs (a workdir lets evals change too), never reruns."""
    from encoder.studies import jobconfig, records
    old = {"seed": 0, "train": {"num_steps": 10}, "evals": {}}
    jobconfig.write(str(tmp_path), old)
    new = {**old, "evals": {"sts": {"kind": "embedding", "task": "sts_relatedness"}}}
    assert records.stale_reason(str(tmp_path), new) == []
    assert records.stale_reason(str(tmp_path), {k: v for k, v in new.items()
                                                if k != "evals"}) == []
    assert records.stale_reason(str(tmp_path), {**new, "seed": 1}) == ["seed: 0 -> 1"]


def test_equal_flops_refuses_a_sweep_of_the_steps_it_sets():
    """--sweep=train.num_steps=4,8 --equal_flops once trained both for 4 steps."""
    base = _base()
    with pytest.raises(errors.UsageError, match=r"train\.num_steps=\.\.\. sets train\.num_steps"
                                                r", which --equal_flops sets"):
        ablation.check_equal_flops([ablation.parse_sweep("train.num_steps=4,8")], base)
    ablation.check_equal_flops([ablation.parse_sweep("model.activation=gelu,relu")], base)


def _scored(workdir, name, step, **options):
    from encoder.jobs import evals
    from encoder.train import metrics_io
    opts = {k: v for k, v in evals.entry("probe", task="topic", **options).items()
            if k not in ("kind", "every")}
    os.makedirs(workdir)
    metrics_io.ScoreRecord(str(workdir)).add(evals.Declared(name, "probe", 4, opts, None),
                                             step, {"score": 0.5})


def test_a_study_whose_evaluator_changed_options_is_refused(tmp_path):
    """Finished runs were once skipped with their max_train=1000 scores
    and ranked beside a new variant's max_train=50 ones."""
    from encoder.jobs import evals
    base = _base()
    base.evals = {"topic": evals.entry("probe", task="topic")}
    planned = ablation.plan(base, [{"model.activation": "gelu"}], 1, False)
    root = tmp_path / "study"
    _scored(root / "runs" / planned[0]["dir"], "topic", 4)
    ablation.check_protocols(planned, str(root))  # the same options: fine
    base.evals.topic.max_train = 50
    planned = ablation.plan(base, [{"model.activation": "gelu"}], 1, False)
    with pytest.raises(errors.UsageError, match=r"run activation=gelu__seed0: config\.evals\."
                                                r"topic \(max_train: 1000 -> 50; scored at step "
                                                r"4.*two protocols"):
        ablation.check_protocols(planned, str(root))


def test_rows_scored_under_different_options_are_not_ranked_on_that_score(tmp_path):
    from encoder.jobs import evals
    rows = []
    for variant, max_train in (("a", 1000), ("b", 1000), ("c", 50)):
        for seed in (0, 1):
            rows.append({"variant": variant, "seed": seed, "dir": f"{variant}__seed{seed}",
                         "objective": "mlm", "steps": 4, "checkpoint_step": 4,
                         "final_train_loss": 5.0, "tokens_per_s": 1.0, "flops": 1e9,
                         "parameters": 10, "curve": [(1, 6.0)], "eval/mlm_accuracy": 0.3,
                         "evals/topic/score": 0.7 if max_train == 1000 else 0.5,
                         "protocol/topic": evals.key("probe", {"task": "topic",
                                                               "max_train": max_train})})
    assert ablation.primary_metric(rows) == "eval/mlm_accuracy"
    assert ablation.primary_metric(rows[:4]) == "evals/topic/score"
    ablation.write_results(rows, str(tmp_path))
    text = (tmp_path / "results.md").read_text()
    assert "evals/topic is not compared: its runs were scored under different options: " \
           "max_train=1000 (a, b); max_train=50 (c)" in text
    assert "protocol/topic" in (tmp_path / "runs.csv").read_text().splitlines()[0]


def test_a_suite_folder_with_no_task_is_refused_before_any_run(tmp_path):
    """Both runs once trained 74 s, then each suite failed with
    "no tasks found (empty)" for a folder of .txt files."""
    corp = tmp_path / "corp"
    corp.mkdir()
    (corp / "a.txt").write_text("text\n")
    root = tmp_path / "study"
    study = ablation.Study(workdir=str(root), config=_base(), sweeps=("objective=mlm",),
                           suite=str(corp))
    with pytest.raises(errors.UsageError) as e:
        ablation.run_study(study, launcher=None)
    assert f"--suite={corp}: {corp}: no tasks found (it holds files (a.txt), no task folder: " \
           "a task is a folder with train.jsonl" in str(e.value)
    assert not root.exists()


def test_the_watchers_say_what_they_run_on_each_checkpoint():
    full = ablation.watch_line(ablation.Study(workdir="s", config=None, watch=True))
    assert "the embedded suite, fine-tuning every task at each checkpoint: " \
           "--suite_arg=--probe_only" in full
    quick = ablation.watch_line(ablation.Study(workdir="s", config=None, watch=True,
                                               suite_args=("--probe_only",)))
    assert quick.endswith("--probe_only on each checkpoint (the embedded suite)")


def test_a_sweep_of_an_evaluator_option_is_refused():
    """Two identical models once trained, then "not compared"."""
    with pytest.raises(errors.UsageError, match=r"--sweep=evals\.topic\.max_train=\.\.\.: "
                                                r"config\.evals changes what a run is scored by"):
        ablation.check_sweeps([ablation.parse_sweep("evals.topic.max_train=50,1000")], None)
