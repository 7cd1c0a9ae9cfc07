"""config.evals (encoder/jobs/evals.py): the declaration checked before any work, the
loop's action at each evaluator's cadence, and a resumed run reading its scores back."""
import json

import pytest

from encoder.errors import UsageError
from encoder.jobs import evals as declared
from encoder.train import loop, metrics_io


@pytest.mark.parametrize("evals, words", [
    ({"a": {"kind": "bleu"}}, ["config.evals.a.kind='bleu'", "heldout, embedding, probe"]),
    ({"a": {"kind": "probe"}}, ["config.evals.a", "needs task="]),
    ({"a": {"kind": "embedding", "task": "topic"}}, ["'topic' is a classification task",
                                                    "sts or retrieval"]),
    ({"a": {"kind": "probe", "task": "sts_relatedness"}}, ["is a sts task", "with a probe"]),
    ({"a": {"kind": "embedding", "task": "stsb"}}, ["task='stsb'", "sts_relatedness"]),
    ({"a": {"kind": "heldout", "batchs": 4}}, ["unknown option 'batchs'", "batches"]),
    ({"a": {"kind": "heldout", "every": -5}}, ["config.evals.a.every=-5"]),
    ({"a": {"kind": "heldout", "every": "100"}}, ["config.evals.a.every='100'"]),
    # refused here, before training (they once failed after it)
    ({"a": declared.entry("probe", task="topic", layer=99)},
     ["config.evals.a.layer=99", "2 layers", "0 (the embeddings) to 2, or -1"]),
    ({"a": declared.entry("probe", task="topic", tasks="/nonexist")},
     ["config.evals.a.tasks='/nonexist' is not a folder"]),
    ({"a": declared.entry("embedding", task="sts_relatedness", pooling="meen")},
     ["config.evals.a.pooling='meen'", "cls, cls_tanh, cls_gelu, mean, max"]),
    ({"a": declared.entry("embedding", task="sts_relatedness", max_eval=-5)},
     ["config.evals.a.max_eval=-5", "at least 0"]),
])
def test_a_declaration_is_refused_naming_the_field(evals, words):
    with pytest.raises(UsageError) as e:
        declared.parse(evals, checkpoint_every=10, num_layers=2)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_a_kind_changed_by_flag_drops_the_other_kinds_filling():
    """--config.evals.topic.kind=embedding over entry("probe") once said
    "unknown option 'layer'"; the probe's defaults are dropped, a changed one is not."""
    e = {**declared.entry("probe", task="sts_relatedness"), "kind": "embedding"}
    [(_, kind, _, options)] = declared.parse({"a": e}, 10, 2)
    assert kind == "embedding" and "layer" not in options and "max_train" not in options
    with pytest.raises(UsageError, match="unknown option 'layer'"):
        declared.parse({"a": {**e, "layer": 1}}, 10, 2)


def test_a_task_without_a_frozen_evaluator_names_those_with_one():
    with pytest.raises(UsageError) as e:
        declared.from_tasks(["api_qa"])
    assert "evals='api_qa': a qa task has no frozen evaluator" in str(e.value)
    assert "topic" in str(e.value) and "sts_relatedness" in str(e.value)


def test_defaults_and_the_cadence_of_each_checkpoint():
    parsed = declared.parse({"sts": declared.entry("embedding", task="sts_relatedness"),
                             "ho": {"kind": "heldout", "every": 3, "batches": 2}}, 10)
    assert [(n, k, e) for n, k, e, _ in parsed] == [("sts", "embedding", 10), ("ho", "heldout", 3)]
    assert parsed[0][3]["max_eval"] == 500 and parsed[1][3] == {"batches": 2}
    assert declared.from_tasks(["topic", "api_retrieval"]) == {
        "topic": declared.entry("probe", task="topic"),
        "api_retrieval": declared.entry("embedding", task="api_retrieval")}


class _Window:
    absorbed = 0

    def absorb(self):
        self.absorbed += 1


class _State:
    params = {"w": 1.0}


def _ticks(action, steps, last, stop_at=None):
    for step in steps:
        stop = "done" if step == last else ("signal" if step == stop_at else "")
        tick = loop.Tick(step, _State(), stop=stop)
        action(tick)
        yield tick


def _evaluate(evs, record):
    """The loop's one evaluation action over declared evaluators and their record."""
    from encoder.eval import evaluators
    return loop.Evaluate([evaluators.Recorded(ev, record) for ev in evs], _Window(), {})


def _evaluator(calls, every, name="ho", **options):
    def fn(params, step):
        calls.append(step)
        return {"loss": step / 10}
    return declared.Declared(name, "heldout", every, {"batches": 2, **options}, fn)


def test_each_evaluator_at_its_cadence_and_a_resume_scores_no_step_twice(tmp_path):
    calls, other = [], []
    evs = [_evaluator(calls, 4), _evaluator(other, 5, name="b")]
    action = _evaluate(evs, metrics_io.ScoreRecord(str(tmp_path)))
    rows = {t.step: t.row for t in _ticks(action, range(1, 10), last=None, stop_at=9)}
    assert calls == [4, 8] and other == [5]  # a signal's stop (step 9) is no score
    assert rows[8] == {"evals/ho/loss": 0.8} and rows[9] == {}
    # killed after scoring step 8, resumed from a checkpoint at step 6: the replayed step 8
    # is read back; step 12 (the last) is scored; a changed option is a new evaluator
    calls2, changed = [], []
    evs = [_evaluator(calls2, 4), _evaluator(changed, 4, name="c", batches=3)]
    action = _evaluate(evs, metrics_io.ScoreRecord(str(tmp_path)))
    rows = {t.step: t.row for t in _ticks(action, range(7, 13), last=12)}
    assert calls2 == [12] and rows[8]["evals/ho/loss"] == 0.8
    assert changed == [8, 12]
    with open(tmp_path / metrics_io.SCORES) as f:
        scored = [(r["name"], r["step"]) for r in map(json.loads, f)]
    assert scored == [("ho", 4), ("b", 5), ("ho", 8), ("c", 8), ("ho", 12), ("c", 12)]


def test_a_torn_last_line_is_scored_again(tmp_path):
    calls = []
    ev = _evaluator(calls, 2)
    rec = metrics_io.ScoreRecord(str(tmp_path))
    rec.add(ev, 2, {"loss": 0.2})
    with open(tmp_path / metrics_io.SCORES, "a") as f:
        f.write('{"name": "ho", "step": 4, "ke')  # killed mid-write
    rec = metrics_io.ScoreRecord(str(tmp_path))
    assert rec.get(ev, 2) == {"loss": 0.2} and rec.get(ev, 4) is None


def test_a_changed_option_of_a_scored_evaluator_is_refused_on_resume(tmp_path):
    """A restart with topic.max_train 1000 -> 100 once mixed two protocols
    in one curve under one name. The record's keys are compared before any work."""
    rec = metrics_io.ScoreRecord(str(tmp_path))
    old = declared.entry("probe", task="topic")
    for step in (2, 4):
        rec.add(declared.Declared("topic", "probe", 2, {k: v for k, v in old.items()
                                                         if k not in ("kind", "every")},
                                  None), step, {"score": 0.5})
    same = {"topic": dict(old)}
    declared.check_record(same, 2, str(tmp_path))  # the same protocol resumes
    declared.check_record({**same, "sts": declared.entry("embedding", task="sts_relatedness")},
                          2, str(tmp_path))  # a new evaluator is scored from here on
    declared.check_record({"topic": {**old, "every": 4}}, 2, str(tmp_path))  # cadence only
    with pytest.raises(UsageError) as e:
        declared.check_record({"topic": {**old, "max_train": 100}}, 2, str(tmp_path))
    msg = str(e.value)
    assert "config.evals.topic (max_train: 1000 -> 100; scored at step 2, 4" in msg, msg
    assert "mix two protocols" in msg and "new name" in msg
    declared.check_record({"topic": {**old, "max_train": 100}}, 2, str(tmp_path / "new"))


def test_a_task_file_changed_under_a_scored_evaluator_is_refused_on_resume(tmp_path):
    """The task folder's dev labels edited between two starts, the same path and
    options: the curve once went on, scored on other data, silently."""
    from helpers import topic_task
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=16, n_dev=8)
    entry = declared.entry("probe", task="topic", tasks=str(tasks) + "/")  # DIR/ is DIR
    [(_, kind, _, options)] = declared.parse({"topic": entry}, 2, 2)
    assert options["tasks"] == str(tasks)
    data = declared.task_data(options, str(tmp_path))
    assert len(data) == 16
    metrics_io.ScoreRecord(str(tmp_path)).add(
        declared.Declared("topic", kind, 2, options, None, data), 2, {"score": 0.5})
    declared.check_record({"topic": entry}, 2, str(tmp_path))  # the same files: resumes
    dev = tasks / "topic" / "dev.jsonl"
    dev.write_text(dev.read_text().replace('"label": "', '"label": "x', 1))
    with pytest.raises(UsageError, match=r"config\.evals\.topic \(its task files changed "
                                         r"\(sha256 [0-9a-f]{16} -> [0-9a-f]{16}\); scored at "
                                         r"step 2"):
        declared.check_record({"topic": entry}, 2, str(tmp_path))
    with pytest.raises(UsageError, match=r"config\.evals\.a\.task='nope': .*--only names"):
        declared.parse({"a": declared.entry("probe", task="nope", tasks=str(tasks))}, 2, 2)


def test_heldout_by_option_a_probe_task_without_dev_and_a_torn_record(tmp_path):
    """evals=heldout, a probe task without a dev file, and a torn record line."""
    assert declared.from_tasks(["heldout"]) == {"heldout": declared.entry("heldout")}
    from helpers import topic_task
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=8, n_dev=4)
    (tasks / "topic" / "dev.jsonl").unlink()
    with pytest.raises(UsageError, match=r"config\.evals\.a\.task='topic': .*topic: no dev\.jsonl"):
        declared.parse({"a": declared.entry("probe", task="topic", tasks=str(tasks))}, 2, 2)
    ev = _evaluator([], 2)
    rec = metrics_io.ScoreRecord(str(tmp_path))
    rec.add(ev, 2, {"loss": 0.2})
    with open(tmp_path / metrics_io.SCORES, "a") as f:
        f.write('{"name": "ho", "step": 4, "ke')  # killed mid-write
    metrics_io.ScoreRecord(str(tmp_path)).add(ev, 4, {"loss": 0.4})  # the redone score
    again = metrics_io.ScoreRecord(str(tmp_path))
    assert again.get(ev, 2) == {"loss": 0.2} and again.get(ev, 4) == {"loss": 0.4}
