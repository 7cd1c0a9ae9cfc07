"""The watcher (encoder/studies/watch.py) scores each checkpoint of a run exactly once,
across a restart of the watcher and while the run adds checkpoints, and each curve row
carries the step, tokens and FLOPs of what it scored. The suite itself is passed in; here a
scorer that records what it was asked (the suite's own runs: tests/e2e/test_suite_runs.py)."""
import dataclasses
import json
import os

import jax
import pytest

from encoder.jobs import pretrain
from encoder.studies import watch
from helpers import tiny_pretrain_config


@dataclasses.dataclass(frozen=True)
class Opts:
    init_from: str = ""
    workdir: str = ""
    tasks: str = "/tasks"


def scorer(calls, tasks=None):
    def run_suite(opts):
        calls.append(opts.init_from)
        if tasks is not None:
            tasks.append(opts.tasks)
        os.makedirs(opts.workdir, exist_ok=True)
        step = int(opts.init_from.rsplit("@", 1)[1])
        return {"tasks": [{"task": "topic", "median": float(step)}],
                "averages": {"average": step / 2}, "probes": {"topic": {"layers": [0.1, 0.3]}}}
    return run_suite


def test_each_checkpoint_is_scored_once_across_restarts(tmp_path):
    run = str(tmp_path / "run")
    config = tiny_pretrain_config(num_steps=4, checkpoint_every=2, keep_checkpoints=5)
    pretrain.train(config, run, devices=jax.devices()[:1])
    out, calls = str(tmp_path / "watch"), []
    # a watcher that saw only step 2 (as if it started while the run trained), then stopped
    os.makedirs(out)
    done = watch.score_new(run, out, Opts(tasks=""), scorer(calls))
    assert calls == [f"{run}@2", f"{run}@4"] and len(done) == 2
    result = watch.watch(run, out, Opts(tasks=""), scorer(calls), once=True)  # a restart: nothing new
    assert calls == [f"{run}@2", f"{run}@4"] and result["scored"] == [2, 4]
    # the run goes on: only its new checkpoints are scored, then the watcher ends (finished)
    config.train.num_steps = 6
    pretrain.train(config, run, devices=jax.devices()[:1])
    seen = []
    result = watch.watch(run, out, Opts(tasks=""), scorer(calls, seen), poll_s=0,
                         sleep=lambda s: None)
    # the embedded suite: built once into the watch folder, read by every checkpoint's suite
    assert seen == [os.path.join(out, "tasks")] and os.path.isdir(os.path.join(out, "tasks",
                                                                                "topic"))
    assert calls[2:] == [f"{run}@6"] and result == {"scored": [2, 4, 6], "missed": [],
                                                    "finished": True}
    rows = [json.loads(line) for line in open(os.path.join(out, "curve.jsonl"))]
    tokens, flops = watch.per_step(run)
    assert tokens == config.train.batch_size * config.data.seq_len and flops > 0
    assert [(r["step"], r["tokens"], r["suite/topic"]) for r in rows] == [
        (s, s * tokens, float(s)) for s in (2, 4, 6)]
    assert rows[0]["probe/topic/best"] == 0.3 and rows[0]["flops"] == pytest.approx(2 * flops)


def test_a_folder_that_is_not_a_run_yet_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a pretraining workdir"):
        watch.watch(str(tmp_path), str(tmp_path / "out"), Opts(), scorer([]), once=True)


def test_a_study_watcher_waits_for_its_run_and_ends_with_its_job(tmp_path):
    """--watch_follow_job (ablate --watch): before the run starts, it waits; a run whose job
    ended unfinished (a NaN, a kill) ends the watcher instead of holding the study forever."""
    from encoder.studies import records
    run = tmp_path / "run"
    run.mkdir()
    waits = []

    def sleep(s):  # the run's job fails before writing anything
        waits.append(s)
        records.write_exit(str(run), 1)
    result = watch.watch(str(run), str(tmp_path / "w"), Opts(), scorer([]), poll_s=5,
                         sleep=sleep, follow_job=True)
    assert waits == [5] and result == {"scored": [], "missed": [], "finished": False}
    # a run that trained to step 2 and stopped (exit 75) unfinished: what it kept, then out
    config = tiny_pretrain_config(num_steps=2, checkpoint_every=2)
    pretrain.train(config, str(tmp_path / "r2"), devices=jax.devices()[:1])
    with open(tmp_path / "r2" / "run.json") as f:
        record = json.load(f)
    record.pop("finished")
    with open(tmp_path / "r2" / "run.json", "w") as f:
        json.dump(record, f)
    records.write_exit(str(tmp_path / "r2"), 75)
    calls = []
    result = watch.watch(str(tmp_path / "r2"), str(tmp_path / "w2"), Opts(), scorer(calls),
                         sleep=lambda s: pytest.fail("waited on an ended job"), follow_job=True)
    assert calls == [f"{tmp_path / 'r2'}@2"] and not result["finished"]


def test_the_scored_line_names_the_scores_it_has():
    """A probe-only watch once printed "scored W@4: " and nothing."""
    assert watch.summary({"step": 4, "suite/average": 6.5, "suite/average_glue": 5.0,
                          "suite/topic": 1.0}) == "suite/average=6.5, suite/average_glue=5"
    assert watch.summary({"step": 4, "tokens": 10, "probe/topic/best": 0.75,
                          "probe/topic/layer_1": 0.7}) == "probe/topic/best=0.75"
    assert watch.summary({"step": 4}).startswith("no score")
