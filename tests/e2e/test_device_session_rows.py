"""The device session's rows, produced for real at CPU sizes (benchmarks/device_session.py
--cpu): every row its benchmarks print carries the fields benchmarks/device_tables.py
reads, the PyTorch sides match this codebase's parameter count, and the tables render."""
import json

from benchmarks import device_session, device_tables
from helpers import TORCH_GROUP, child_env

pytestmark = TORCH_GROUP

# one entry of each kind of row: side by side with PyTorch (eager and compiled), the
# profile, the unrolled step, ModernBERT's packed rows (eager)
KINDS = ("bert_128_torch", "profile_bert_128", "bert_128_unrolled", "modernbert_8192_torch")


def test_each_kind_of_row_has_the_fields_the_tables_read(tmp_path, monkeypatch):
    for key, value in child_env().items():
        monkeypatch.setenv(key, value)
    plan = [e for e in device_session.PLAN if e.name in KINDS]
    records = device_session.run_plan(str(tmp_path), budget_s=900, cpu=True, plan=plan)
    assert [r["status"] for r in records] == ["ok"] * len(KINDS), [
        (r, (tmp_path / f"{r['entry']}.stderr").read_text()[-2000:]) for r in records]
    groups = device_tables.read_rows(str(tmp_path))
    sides = {name: device_tables.step_rows(rows) for name, rows in groups.items()}
    assert [r["implementation"] for r in sides["bert_128_torch"]] == [
        "this codebase", "huggingface BertForMaskedLM (PyTorch eager)",
        "huggingface BertForMaskedLM (PyTorch torch.compile)"]
    assert [r["implementation"] for r in sides["modernbert_8192_torch"]] == [
        "this codebase", "huggingface ModernBertForMaskedLM (PyTorch eager)"]
    assert sides["profile_bert_128"] == []  # its one line is the profile's, not a side's
    for name in ("bert_128_torch", "bert_128_unrolled", "modernbert_8192_torch"):
        rows = sides[name]
        assert rows, name
        for row in rows:
            missing = [f for f in device_tables.STEP_FIELDS if f not in row]
            assert not missing, (name, missing)
            assert row["tokens_per_s"] > 0 and 0 < row["mfu"] and row["loss"] > 0
            assert row["parameters"] == rows[0]["parameters"]
            assert row["threads"]["xla"] >= 1
    torch_rows = [r for r in sides["bert_128_torch"] if r["implementation"] != "this codebase"]
    assert all(r["threads"]["torch"] >= 1 and r["speedup"] > 0 for r in torch_rows)
    # the same FLOP count on every side: MFU ratios are tokens/s ratios
    ours = sides["bert_128_torch"][0]
    assert all(r["flops_per_step"] == ours["flops_per_step"] for r in torch_rows)
    with open(tmp_path / "profile_bert_128" / "profile.json") as f:
        profile = json.load(f)
    assert not [f for f in device_tables.PROFILE_FIELDS if f not in profile]
    shares = [c["share"] for c in profile["categories"]]
    assert abs(sum(shares) - 1) < 1e-6 and max(shares) < 1
    matrix = next(c for c in profile["categories"] if c["category"] == "matrix products")
    assert matrix["ms_per_step"] > 0  # the trace's ops were matched to the program's
    text = device_tables.markdown(str(tmp_path))
    assert "PyTorch torch.compile" in text and "| matrix products |" in text
