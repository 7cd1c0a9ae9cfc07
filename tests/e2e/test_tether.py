"""encoder/tether.py: a child started with child_env() that calls hold() gets SIGTERM when
its parent dies, however it dies: through the kernel's parent-death signal (Linux) or the
polling thread (what macOS gets), and at once when the parent was gone before hold()."""
import os
import signal
import subprocess
import sys
import time

import pytest

from encoder import tether
from helpers import ROOT, alive

# The child: tied to its parent, says how and whether the variable is gone, then waits;
# SIGTERM (the clean stop a job checkpoints on) writes a line and exits 75.
CHILD = """
import os, signal, sys, time
from encoder import tether
out = sys.argv[1]
def stopped(signum, frame):
    with open(out, "a") as f:
        f.write(f"stopped by {signum}\\n")
    os._exit(75)
signal.signal(signal.SIGTERM, stopped)
time.sleep(float(sys.argv[3]))
how = tether.hold(use_prctl=sys.argv[2] == "prctl")
with open(out, "a") as f:
    f.write(f"held {how} {tether.ENV in os.environ}\\n")
time.sleep(60)
"""
# The parent: starts the child tethered, prints its pid, waits to be killed.
PARENT = """
import os, subprocess, sys, time
from encoder import tether
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]],
                         env=tether.child_env())
print(child.pid, flush=True)
time.sleep(60)
"""


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def kill_parent_and_watch(tmp_path, how: str, delay: float = 0.0, kill_after: str = "held"):
    out = tmp_path / "child.txt"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(out), how, str(delay)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        if kill_after == "held":
            assert wait_for(lambda: out.exists() and "held" in out.read_text(), 20), \
                "the child never held"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_for(lambda: not alive(child), 10), f"child {child} outlived its parent"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
    return out.read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_kernel_stops_the_child_when_its_parent_is_killed(tmp_path):
    text = kill_parent_and_watch(tmp_path, "prctl")
    assert "held prctl False" in text  # the variable is not passed on to grandchildren
    assert f"stopped by {int(signal.SIGTERM)}" in text


def test_the_polling_fallback_stops_the_child_too(tmp_path):
    text = kill_parent_and_watch(tmp_path, "poll")
    assert "held poll False" in text and f"stopped by {int(signal.SIGTERM)}" in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_parent_gone_before_hold_stops_the_child_at_once(tmp_path):
    text = kill_parent_and_watch(tmp_path, "prctl", delay=1.5, kill_after="start")
    assert "held" not in text and f"stopped by {int(signal.SIGTERM)}" in text


def test_without_the_variable_hold_does_nothing(monkeypatch):
    monkeypatch.delenv(tether.ENV, raising=False)
    assert tether.hold() == ""
    assert tether.child_env({"A": "1"}) == {"A": "1", tether.ENV: str(os.getpid())}
