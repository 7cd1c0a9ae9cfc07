"""`python -m encoder suite` on a task it cannot learn or score: refused before
the first run, one `error:` line naming the task and its file, exit 1, no folder left.
(The checks themselves: tests/studies/test_suite_early_checks.py.)"""
import json
import os

from helpers import child_env, run_module, topic_task, write_jsonl


def test_a_one_class_task_is_one_line_and_exit_1_before_any_run(tiny_pretrained, tmp_path):
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic")  # a good task beside it, never started
    os.makedirs(tasks / "single")
    (tasks / "single" / "task.json").write_text(json.dumps({"type": "classification"}))
    write_jsonl(tasks / "single" / "train.jsonl", [{"text": f"a {i}", "label": "yes"}
                                                   for i in range(20)])
    write_jsonl(tasks / "single" / "dev.jsonl", [{"text": "b", "label": "yes"},
                                                 {"text": "c", "label": "no"}])
    out = tmp_path / "out"
    rc, stdout, stderr = run_module("encoder", "suite", f"--init_from={tiny_pretrained}",
                                    f"--tasks={tasks}", f"--workdir={out}",
                                    "--preset=runlocal", timeout=240,
                                    env=child_env())
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert rc == 1 and len(errors) == 1, stdout[-1500:] + stderr[-1500:]
    assert errors[0].startswith("error: task single: ") and "single/train.jsonl" in errors[0]
    assert "Traceback" not in stderr and "started" not in stdout
    assert not out.exists()  # refused before anything was kept
