"""Token-level probes: a tag that the word itself decides is read off the embeddings, a tag
that needs the sentence is not, and shuffled tags teach the probe nothing."""
import numpy as np
import pytest


FILLERS = [f"w{i}" for i in range(16)]
VOCAB = FILLERS + ["alpha", "key", "marker", "long", "word"]


class WordTokenizer:
    """One piece per word, except words joined by '_' (one piece per part): enough for
    tasks.featurize_tagging, with multi-piece words to exercise the first-piece rule."""
    pad_id, unk_id, cls_id, sep_id = 0, 1, 2, 3

    def encode(self, text):
        return [5 + VOCAB.index(p) for w in text.split() for p in w.split("_")]


@pytest.fixture
def rope_cfg(tiny_cfg):
    tiny_cfg.position = "rope"  # layer 0 = token identity alone: no position embeddings
    return tiny_cfg


def _context_free(n, seed):
    """'alpha' is B-X wherever it stands: the token decides its tag."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = [str(w) for w in rng.choice(FILLERS + ["long_word"], 10)]
        for _ in range(rng.integers(0, 3)):
            words.insert(int(rng.integers(0, len(words) + 1)), "alpha")
        out.append({"tokens": words, "tags": ["B-X" if w == "alpha" else "O" for w in words],
                    "_where": f"free:{i}"})
    return out


def _needs_context(n, seed):
    """'key' is B-X only when 'marker' stands somewhere before it; every sentence holds
    'key' three times and 'marker' once (in its second half: about a quarter of the keys
    are tagged), so the same word is tagged and untagged."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = [str(w) for w in rng.permutation(list(rng.choice(FILLERS, 9)) + ["key"] * 3)]
        words.insert(int(rng.integers(6, len(words) + 1)), "marker")
        seen = 0
        tags = []
        for w in words:
            seen |= w == "marker"
            tags.append("B-X" if w == "key" and seen else "O")
        out.append({"tokens": words, "tags": tags, "_where": f"ctx:{i}"})
    return out


def test_the_suite_probes_tagging_beside_classification_without_fine_tuning(tiny_pretrained,
                                                                           tmp_path):
    from encoder.studies.suite import battery
    from helpers import topic_task, write_jsonl
    tasks = tmp_path / "tasks"
    topic_task(tasks / "topic", n_train=32, n_dev=16)
    (tasks / "tags").mkdir()
    rows = [{"tokens": ex["tokens"], "tags": ex["tags"]} for ex in _context_free(48, 0)]
    for w in rows:  # the pretrained tokenizer's words, not the stub's
        w["tokens"] = ["file" if t == "alpha" else "the" for t in w["tokens"]]
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
