"""Ablation tables report what ran: a repeated sweep value is refused (it would be one run
reported as two seeds), a one-seed gap carries no significance."""

import pytest


def test_a_device_benchmark_whose_every_configuration_failed_exits_non_zero(monkeypatch):
    import subprocess
    import types
    from benchmarks import device
    monkeypatch.setattr(device, "FLAGS", types.SimpleNamespace(steps=1, warmup=1))
    monkeypatch.setattr(device, "DEVICE_PLAN", [["--size=tiny"], ["--size=mini"]])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: types.SimpleNamespace(
        returncode=1, stdout="", stderr="no GPU"))
    with pytest.raises(SystemExit, match="every configuration .* failed \\(2 of 2\\)"):
        device.run()
