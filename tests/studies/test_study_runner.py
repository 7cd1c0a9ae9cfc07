"""The study runner: runs as data, status from workdir records, the local launcher."""
import json
import os
import sys
import time

import pytest

from encoder.studies import jobconfig, launchers, records, runner
from encoder.studies.launchers import local

from helpers import ROOT


def test_a_job_config_file_holds_the_config_as_data(tmp_path):
    config = {"a": {"b": 1.5, "s": "it's ''' a \\ path"}, "t": [1, 2], "n": None, "f": True}
    path = jobconfig.write(str(tmp_path), config)
    assert jobconfig.read(str(tmp_path)) == config
    # it is an experiment file `encoder run` can load (config_flags' loader)
    loaded = jobconfig.load_experiment(path)
    assert loaded.to_dict() == config
    assert jobconfig.read(str(tmp_path / "nowhere")) is None


def test_overrides_are_typed_and_unknown_fields_refused():
    sys.path.insert(0, ROOT)
    from experiments import pretrain
    base = pretrain.get_config("runlocal")
    c = jobconfig.override(base, jobconfig.parse_sets(["train.learning_rate=1e-3",
                                                       "train.num_steps=7", "seed=2"]))
    assert (c.train.learning_rate, c.train.num_steps, c.seed) == (1e-3, 7, 2)
    assert isinstance(c.train.num_steps, int) and base.train.num_steps != 7
    with pytest.raises(ValueError, match="no 'lerning_rate'"):
        jobconfig.override(base, {"train.lerning_rate": 1.0})
    with pytest.raises(ValueError, match="expected field=value"):
        jobconfig.parse_sets(["train.num_steps"])
    assert jobconfig.changed_fields({"a": {"b": 1}, "c": 2}, {"a": {"b": 3}, "c": 2}) == [
        "a.b: 1 -> 3"]


def _finish(workdir: str) -> None:
    with open(os.path.join(workdir, "run.json"), "w") as f:
        json.dump({"config": {}, "finished": {"step": 1}}, f)


def test_status_is_read_from_the_workdir(tmp_path):
    d, config = str(tmp_path / "r"), {"x": 1}
    assert records.status(d, config).state == "new"
    jobconfig.write(d, config)
    assert records.status(d, config).state == "new"
    assert records.status(d, {"x": 2}) == records.Status("stale", "x: 1 -> 2")
    records.write_exit(d, 75)
    assert records.status(d, config).state == "stopped"
    records.write_exit(d, 3)
    assert records.status(d, config) == records.Status("failed", "exit 3")
    records.clear_exit(d)
    os.makedirs(os.path.join(d, "checkpoints", "4"))
    assert records.status(d, config).state == "stopped"  # killed: resumable
    with open(os.path.join(d, "LOCK"), "w") as f:
        json.dump({"host": os.uname().nodename, "pid": os.getpid()}, f)
    assert records.status(d, config).state == "running"
    _finish(d)
    assert records.status(d, config).state == "done"
    other = tmp_path / "foreign"
    other.mkdir()
    (other / "metrics.jsonl").write_text("")
    assert records.status(str(other), config).state == "stale"  # not a run of this study


class Scripted(local.Local):
    """The local launcher, each run's command a small Python program from its config."""

    def command(self, run):
        return [sys.executable, "-c", run.config["code"]]


def _runs(tmp_path, codes: dict) -> list:
    return [runner.make_run(name, str(tmp_path / name), {"code": code})
            for name, code in codes.items()]


FINISH = ("import json, os; open('run.json', 'w').write(json.dumps({'config': {}, "
          "'finished': {'step': 1}}))")


def test_a_failed_run_is_reported_with_its_log_and_hides_no_other(tmp_path):
    runs = _runs(tmp_path, {"ok": FINISH, "bad": "print('boom'); raise SystemExit(3)",
                            "zero": "pass", "ok2": FINISH})
    for r in runs:  # the scripts write into their cwd: start them in the run's workdir
        r.config["code"] = f"import os; os.chdir({r.workdir!r}); " + r.config["code"]
    lines = []
    started, failures = runner.execute(runs, Scripted(parallel=2), log=lines.append)
    assert [r.name for r in started] == ["ok", "bad", "zero", "ok2"]
    assert sorted(str(f).split(":")[0] for f in failures) == ["bad", "zero"]
    bad = next(f for f in failures if f.run.name == "bad")
    assert "exit 3" in str(bad) and bad.run.log in str(bad)
    assert any("FAILED bad" in line and "boom" in line for line in lines)
    assert "finished ok" in lines and "finished ok2" in lines
    # the next start skips what is done and starts only the rest
    lines.clear()
    started, _ = runner.execute(runs, Scripted(parallel=2), log=lines.append)
    assert [r.name for r in started] == ["bad", "zero"]
    assert "skip ok (finished)" in lines


def test_a_changed_config_moves_the_old_run_aside(tmp_path):
    run = runner.make_run("r", str(tmp_path / "r"), {"code": "pass", "lr": 1})
    runner.prepare(run, log=lambda *_: None)
    _finish(run.workdir)
    lines = []
    moved = runner.make_run("r", str(tmp_path / "r"), {"code": "pass", "lr": 2})
    assert runner.prepare(moved, log=lines.append)
    assert "rerunning r: its configuration changed (lr: 1 -> 2)" in lines[0]
    assert len(list(tmp_path.glob("r.stale-*"))) == 1
    assert jobconfig.read(moved.workdir)["lr"] == 2 and not records.finished(moved.workdir)


def test_an_interrupted_study_stops_its_children(tmp_path):
    runs = _runs(tmp_path, {"slow": "import time; time.sleep(120)", "bad": "raise SystemExit(2)"})
    procs = []

    class Watched(Scripted):
        def start(self, run):
            procs.append(super().start(run))
            return procs[-1]

    def on_exit(run):
        raise KeyboardInterrupt  # Ctrl-C lands while the slow sibling runs

    for r in runs:
        runner.prepare(r, log=lambda *_: None)
    t0 = time.time()
    with pytest.raises(KeyboardInterrupt):
        Watched(parallel=2, stop_timeout=30).run(runs, on_exit, log=lambda *_: None)
    assert all(p.poll() is not None for p in procs) and time.time() - t0 < 60
    assert records.read_exit(runs[1].workdir)["rc"] == 2


def test_a_sigterm_of_the_study_waits_for_its_children_to_stop(tmp_path):
    """SIGTERM of the study (a scheduler, `timeout`) stops the children and waits for them
    to checkpoint before the study exits, as Ctrl-C does; it does not die at once and leave
    them writing while the next command starts."""
    import signal
    marker = tmp_path / "checkpointed"
    child = ("import signal, sys, time\n"
             "def stop(*_):\n"
             "    time.sleep(1.0)  # the last checkpoint being written\n"
             f"    open({str(marker)!r}, 'w').write('done')\n"
             "    sys.exit(75)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             "print('re' + 'ady', flush=True)  # not the command line's words\n"
             "time.sleep(120)\n")
    runs = _runs(tmp_path, {"slow": child})
    runner.prepare(runs[0], log=lambda *_: None)
    before = signal.getsignal(signal.SIGTERM)

    def log(line):  # the study is told to stop once its child runs
        t0 = time.time()
        while "\nready" not in open(runs[0].log).read() and time.time() - t0 < 30:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this sleep
    with pytest.raises(KeyboardInterrupt):
        Scripted(parallel=1, stop_timeout=30).run(runs, lambda r: None, log=log)
    assert marker.read_text() == "done"  # the study waited for the child's last write
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_launcher_table_names_its_entries():
    assert isinstance(launchers.make("local", parallel=2), local.Local)
    with pytest.raises(ValueError, match="valid names: local, slurm, tpu_vm"):
        launchers.make("kubernetes")


def test_runs_stopped_by_a_signal_are_a_resumable_stop_not_a_failure(tmp_path):
    from encoder import errors
    a, b = _runs(tmp_path, {"a": "", "b": ""})
    stopped = runner.Failure(a, "stopped by a signal (checkpointed)", stopped=True)
    broken = runner.Failure(b, "exit 3")
    e = runner.failures_error([stopped])
    assert isinstance(e, errors.Stopped) and "run the same command again to resume" in str(e)
    assert "a: stopped by a signal" in str(e)
    e = runner.failures_error([stopped, broken])  # one broken run: the study failed
    assert isinstance(e, RuntimeError) and str(e).startswith("2 run(s) failed")
