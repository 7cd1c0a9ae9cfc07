"""`python -m encoder COMMAND`: one table of commands, each a module in encoder/commands/,
and the names scripts typed before (`python -m encoder.main`, ...) as shims over them."""
import os
import subprocess
import sys

import pytest

from encoder import commands
from helpers import ROOT, child_env


def _run(*args, timeout=120):
    p = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                       env=child_env(), timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_every_command_has_its_module_and_every_module_its_command():
    folder = os.path.join(ROOT, "encoder", "commands")
    modules = {n[:-3] for n in os.listdir(folder) if n.endswith(".py")}
    helpers = {"__init__", "one_line", "launcher_flags"}  # not commands: what they share
    assert modules - helpers == set(commands.COMMANDS)
    assert set(commands.ALIASES.values()) <= set(commands.COMMANDS)


def test_the_front_door_lists_every_command_and_refuses_an_unknown_one():
    rc, out, _ = _run("-m", "encoder", "--help")
    assert rc == 0
    for name in commands.COMMANDS:
        assert f"  {name} " in out
    rc, _, err = _run("-m", "encoder", "pretrian", "--workdir=x")
    assert rc == 1 and err.strip().splitlines()[0] == "error: unknown command 'pretrian'"
    assert "  run " in err  # the list follows


@pytest.mark.parametrize("name", ["merge", "tasks", "bench"])
def test_a_kept_name_and_the_front_door_run_the_same_command(name, tmp_path):
    alias = next(a for a, c in commands.ALIASES.items() if c == name)
    runs = [_run("-m", *m, "--helpshort") for m in (["encoder", name], [alias])]
    helps = [out for _, out, _ in runs]
    # the old name says its new one first, in one line on stderr; the front door says nothing
    assert runs[1][2].splitlines()[0] == (f"note: `python -m {alias}` is now "
                                          f"`python -m encoder {name}` (or `encoder {name}`)")
    assert "note:" not in runs[0][2]
    # bench: the benchmarks' flags, declared in benchmarks/ (one file per benchmark)
    flag = {"merge": "--workdirs", "tasks": "--out", "bench": "--batch_size"}[name]
    assert flag in helps[0] and flag in helps[1]  # the command's own flags, both ways
    assert helps[0].split("flags:")[1] == helps[1].split("flags:")[1]
    given = {"merge": ["--workdirs=a", f"--out={tmp_path / 'o'}"],
             "tasks": [f"--out={tmp_path / 'o'}"], "bench": []}[name]
    rc, _, err = _run("-m", "encoder", name, *given, "extra")
    assert rc == 1 and "unexpected arguments" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not os.path.exists("/proc/self/comm"), reason="no /proc here")
def test_the_kernel_knows_a_command_by_a_name_without_spaces():
    # absl names the process after argv[0], "encoder tasks"; SLURM's proctrack/linuxproc
    # reads /proc/PID/stat by words and, on a space, never signals the run (preempted
    # runs then ran on to their end)
    probe = ("import sys; from encoder import commands; import encoder.commands.tasks as t; "
             "t.main = lambda argv: print(open('/proc/self/comm').read().strip()); "
             "commands.launch('tasks', ['x', '--out=unused'])")
    rc, out, err = _run("-c", probe)
    assert rc == 0, err
    assert out.strip() == "encoder-tasks"


def test_dry_run_and_detach_are_refused_with_the_local_launcher(tmp_path):
    # with the local launcher they would run everything: a "dry run" once ran four runs
    for flag in ("--dry_run", "--detach"):
        rc, _, err = _run("-m", "encoder", "run", "--config=experiments/pretrain.py:runlocal",
                          f"--workdir={tmp_path / 'w'}", flag)
        assert rc == 1 and f"error: {flag} is for --launcher=slurm or tpu_vm" in err, err
    rc, _, err = _run("-m", "encoder", "ablate", "--config=experiments/pretrain.py:runlocal",
                      "--sweep=train.learning_rate=1e-3", f"--workdir={tmp_path / 's'}",
                      "--dry_run")
    assert rc == 1 and err.strip() == ("error: --dry_run is for --launcher=slurm or tpu_vm (it "
                                       "prints or submits their scripts); with the local "
                                       "launcher it would run everything: drop it, or choose "
                                       "a launcher"), err
    assert not (tmp_path / "w").exists()


def test_an_empty_out_is_named():
    """`tasks --out=` once said only "No such file or directory": the flag is named."""
    rc, _, err = _run("-m", "encoder", "tasks", "--out=")
    assert rc == 1 and err.strip() == "error: --out is empty: give the folder to write the " \
        "tasks into", err
