"""benchmarks/study_tables.py's pretrained-against-random table: a random-init suite cut
short still gives the seeds it finished, and the arms are compared unpaired (Welch)."""
import json
import math
import os
import sys

import pytest

from encoder.studies import stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks import study_tables  # noqa: E402


def _write(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f)


def test_an_interrupted_random_suite_gives_its_finished_seeds(tmp_path):
    pre = {0: 70.0, 1: 74.0, 2: 75.0}
    for seed, score in pre.items():
        _write(tmp_path / f"pretrained_seed{seed}" / "suite.json", {"tasks": [
            {"task": "arg_mentions", "median": score}, {"task": "topic", "median": 90.0}]})
    rnd = {0: 0.60, 1: 0.62}  # seed 2's fine-tuning never finished: no eval.json
    for seed, f1 in rnd.items():
        _write(tmp_path / "random" / "runs" / "arg_mentions" / "0.001" / str(seed) / "eval.json",
               {"dev": {"entity_f1": f1}})
    os.makedirs(tmp_path / "random" / "runs" / "arg_mentions" / "0.001" / "2")
    _write(tmp_path / "random" / "embeddings" / "sts_relatedness" / "0.json",
           {"key": {}, "metrics": {"cosine_spearman": 0.25}})
    lines = study_tables.pays_table(str(tmp_path))
    row = next(line for line in lines if line.startswith("| arg_mentions "))
    expected = stats.compare({("r", k): 100 * v for k, v in rnd.items()},
                             {("p", k): v for k, v in pre.items()})
    d = expected.difference
    assert not expected.paired and math.isfinite(d.low)
    assert f"{d.mean:+.2f} [{d.low:+.2f}, {d.high:+.2f}]" in row
    assert "(3) |" in row and "(2) |" in row                 # seeds each arm contributed
    assert d.mean == pytest.approx(sum(pre.values()) / 3 - 61.0)
    # a task one arm never ran is said, not scored
    assert "| topic | 3 seeds | 0 seeds | not run in both arms" in "\n".join(lines)
    assert "| sts_relatedness | 0 seeds | 1 seeds | not run in both arms" in "\n".join(lines)


def test_a_folder_with_no_study_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["study_tables.py", str(tmp_path)])
    with pytest.raises(SystemExit) as done:
        study_tables.main()
    assert str(done.value).startswith(f"error: {tmp_path} holds neither an MLM/RTD ablation")


def test_runs_moved_aside_or_never_started_are_left_out_and_bad_paths_named(tmp_path,
                                                                             monkeypatch,
                                                                             capsys):
    runs = tmp_path / "runs"
    (runs / "objective=mlm__seed0.stale-20261204-180944").mkdir(parents=True)  # ablate's
    (runs / "objective=mlm__seed0").mkdir()                                   # not started
    assert study_tables.study_curves(str(tmp_path)) == {}
    assert "objective=mlm__seed0 has no config.json yet" in capsys.readouterr().err

    def refused(*argv):
        monkeypatch.setattr(sys, "argv", ["study_tables.py", *argv])
        with pytest.raises(SystemExit) as done:
            study_tables.main()
        return str(done.value)
    assert refused(str(tmp_path / "nope")) == f"error: {tmp_path / 'nope'} does not exist"
    (tmp_path / "f").write_text("")
    assert "is a file" in refused(str(tmp_path / "f"))
    assert "none of its runs has started" in refused(str(tmp_path))
    assert "no folder" in refused(str(tmp_path), f"--plot={tmp_path}/nodir/x.png")
    assert "give a .png file's path" in refused(str(tmp_path), f"--plot={tmp_path}")
