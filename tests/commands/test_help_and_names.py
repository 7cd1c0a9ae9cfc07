"""`COMMAND --help` (and -h, --helpshort) is asked for, so it exits 0; an unknown command
name gets a "did you mean" on its own line (a close command, or `run` for a job's name)."""
import subprocess
import sys

import pytest

from encoder import commands
from helpers import ROOT, child_env


def _run(*args):
    p = subprocess.run([sys.executable, "-m", "encoder", *args], cwd=ROOT, capture_output=True,
                       text=True, env=child_env(), timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("flag", ["--help", "-h", "--helpshort"])
def test_asking_for_a_commands_help_exits_0(flag):
    rc, out, _ = _run("merge", flag)
    assert rc == 0 and "--workdirs" in out


def test_a_bad_flag_beside_no_help_still_exits_1():
    rc, _, err = _run("merge", "--bogus")
    assert rc == 1 and "Unknown command line flag 'bogus'" in err


@pytest.mark.parametrize("typed,suggested", [("exprt", "did you mean 'export'?"),
                                             ("ablte", "did you mean 'ablate'?"),
                                             ("pretrain", "did you mean 'run'? (pretrain is "
                                                          "a job of `run`"),
                                             ("finetune", "did you mean 'run'?")])
def test_an_unknown_command_gets_a_did_you_mean(typed, suggested):
    rc, _, err = _run(typed)
    lines = err.strip().splitlines()
    assert rc == 1 and lines[0] == f"error: unknown command {typed!r}"
    assert lines[1].startswith(suggested)


def test_no_suggestion_for_a_name_close_to_nothing():
    assert commands.did_you_mean("zzzz") == "\n"
    assert "did you mean" not in commands.did_you_mean("qqqqqq")
