"""The suite probes a tagging task beside a classification one, per layer, without
fine-tuning (the probes themselves: tests/jobs/test_probe_tagging.py)."""
from toy_tasks import word_decided_tags


def test_the_suite_probes_tagging_beside_classification_without_fine_tuning(tiny_pretrained,
                                                                           tmp_path):
    from encoder.studies.suite import battery
    from helpers import topic_task, write_jsonl
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=32, n_dev=16)
    (tasks / "tags").mkdir()
    rows = [{"tokens": ex["tokens"], "tags": ex["tags"]} for ex in word_decided_tags(48, 0)]
    for i, w in enumerate(rows):  # the pretrained tokenizer's words, not the stub's; dev
        other = "the" if i < 32 else "a"  # rows of their own (a dev row equal to a training
        w["tokens"] = ["file" if t == "alpha" else other for t in w["tokens"]]  # one is refused)
    write_jsonl(tasks / "tags" / "train.jsonl", rows[:32])
    write_jsonl(tasks / "tags" / "dev.jsonl", rows[32:])
    (tasks / "tags" / "task.json").write_text('{"type": "tagging"}')
    out = tmp_path / "out"
    result = battery.run_suite(battery.SuiteOptions(
        init_from=tiny_pretrained, workdir=str(out), tasks=str(tasks), preset="runlocal",
        probe_only=True, probe_max_train=32))
    assert result["failed"] == 0 and not result["missing"] and not (out / "runs").exists()
    depth = len(result["probes"]["topic"]["layers"])
    assert sorted(result["probes"]) == ["tags", "topic"]
    assert len(result["probes"]["tags"]["layers"]) == len(
        result["probes"]["tags"]["control"]) == depth
    assert result["probes"]["tags"]["layers"][0] > 0.9  # 'file' is B-X: its embedding says so
    assert (out / "probes" / "probes.png").exists()
    assert "| tags |" in (out / "suite.md").read_text()


def test_probe_only_never_replaces_a_report_with_finetuned_tasks(tmp_path):
    """A --probe_only pass over a finished suite's workdir would turn ablate's suite columns
    into an embedding-only average: it is refused; over its own earlier report it runs."""
    import json
    import pytest
    from encoder.studies.suite import battery
    (tmp_path / "suite.json").write_text(json.dumps({"header": {"source": "runs/x"}}))
    with pytest.raises(ValueError, match="fine-tuned tasks"):
        battery.run_suite(battery.SuiteOptions("runs/x", str(tmp_path), probe_only=True))
    (tmp_path / "suite.json").write_text(json.dumps(
        {"header": {"source": "runs/x", "fine-tuning": "none (--probe_only)"}}))
    battery.refuse_to_replace_finetuned_report(str(tmp_path))  # no error
