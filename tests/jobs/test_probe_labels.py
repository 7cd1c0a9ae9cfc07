"""A probe's dev label that no training row has is refused (as fine-tuning and `baselines`
refuse it), not scored 0.0 at every layer."""
import json

import pytest

from encoder.jobs import probe
from encoder.tasks import readers


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_dev_label_unseen_in_training_is_named(tmp_path):
    _write(tmp_path / "train.jsonl", [{"text": f"t{i}", "label": ["a", "b"][i % 2]}
                                      for i in range(20)])
    _write(tmp_path / "dev.jsonl", [{"text": "d0", "label": "a"}, {"text": "d1", "label": "c"}])
    with pytest.raises(readers.TaskDataError, match="dev.jsonl:2: label 'c' was not seen in "
                       "training; known labels: \\['a', 'b'\\]"):
        probe.read_task(str(tmp_path))


def test_dev_labels_all_seen_are_read(tmp_path):
    _write(tmp_path / "train.jsonl", [{"text": f"t{i}", "label": i % 2} for i in range(20)])
    _write(tmp_path / "dev.jsonl", [{"text": "d0", "label": 1}, {"text": "d1", "label": 0}])
    train, dev, _ = probe.read_task(str(tmp_path))
    assert len(train) == 20 and len(dev) == 2


def test_dev_rows_that_are_training_rows_are_refused_by_content(tmp_path):
    rows = [{"text": f"example number {i}", "label": ["a", "b"][i % 2]} for i in range(40)]
    _write(tmp_path / "train.jsonl", rows)
    # the same texts, spaced differently, keys in another order: a copy all the same
    _write(tmp_path / "dev.jsonl", [{"label": r["label"], "text": "  " + r["text"] + " "}
                                    for r in rows[:10]])
    with pytest.raises(readers.TaskDataError, match="10 of 10 held-out rows .* are also "
                       "training rows"):
        probe.read_task(str(tmp_path))


def test_a_larger_shared_share_is_accepted_when_asked(tmp_path):
    rows = [{"text": f"example number {i}", "label": ["a", "b"][i % 2]} for i in range(40)]
    _write(tmp_path / "train.jsonl", rows)
    _write(tmp_path / "dev.jsonl", rows[:1] + [{"text": f"other {i}", "label": "a"}
                                               for i in range(9)])
    with pytest.raises(readers.TaskDataError, match="--max_held_out_overlap=SHARE"):
        probe.read_task(str(tmp_path))
    _, dev, _ = probe.read_task(str(tmp_path), max_overlap=0.2)
    assert len(dev) == 10
