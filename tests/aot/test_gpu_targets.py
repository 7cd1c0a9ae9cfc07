"""GPU targets without the compiler: topology names, the target config XLA reads, the
collectives' replica groups in each form XLA prints, and what a missing compiler says."""
import numpy as np
import pytest

from encoder import errors
from encoder.aot import chips, compile_report, targets
from encoder.aot.hlo import COLLECTIVES, program_contents, replica_groups


def test_gpu_topology_names():
    assert targets.parse_gpu_topology("h100:8") == ("h100", 1, 8)
    assert targets.parse_gpu_topology("h100:2x8") == ("h100", 2, 8)
    assert targets.parse_gpu_topology("A100:4") == ("a100", 1, 4)
    assert targets.parse_gpu_topology("h200:8") == ("h200", 1, 8)
    assert targets.parse_gpu_topology("v5e:2x2") is None  # a TPU's: libtpu reads it
    for bad in ("h100:16", "h100:0", "h100:2x2x8", "h100:"):
        with pytest.raises(errors.UsageError, match="a GPU node is h100:N"):
            targets.parse_gpu_topology(bad)
    with pytest.raises(errors.UsageError, match="--num_slices is for TPU slices"):
        targets.devices("h100:8", num_slices=2)


def test_every_gpu_target_has_chip_constants_and_a_config_xla_reads():
    for name, spec in targets.GPU_SPECS.items():
        chip = chips.chip_for_topology(f"{name}:8")
        assert "InfiniBand" in chip.interconnect
        assert abs(chip.hbm_bytes - spec.memory_bytes) / spec.memory_bytes < 0.1
        text = targets.gpu_target_config(spec, (9, 10, 2))
        major, minor = spec.capability
        assert f"major: {major}\n    minor: {minor}" in text
        assert f'device_description_str: "{spec.description}"' in text
        assert "dnn_version_info {\n  major: 9\n  minor: 10\n  patch: 2\n}" in text
        assert "collective_memory_granularity" not in text  # jaxlib 0.10.2 cannot parse it
    assert targets.GPU_SPECS["h100"].capability == (9, 0)
    assert targets.GPU_SPECS["a100"].capability == (8, 0)


def test_a_missing_cuda_compiler_names_the_install(monkeypatch, tmp_path):
    monkeypatch.setattr(targets, "_cuda_plugin", lambda: None)
    from jax._src import xla_bridge
    monkeypatch.setattr(xla_bridge, "_topology_factories",
                        {k: v for k, v in xla_bridge._topology_factories.items() if k != "cuda"})
    with pytest.raises(errors.UsageError, match="requirements-gpu-compile.txt"):
        targets.devices("h100:8")


def _groups(line):
    return replica_groups(line, 16)


def test_replica_groups_in_each_form():
    # explicit lists
    assert _groups("all-reduce(x), replica_groups={{0,1},{2,3}}, to_apply=add") == [[0, 1],
                                                                                   [2, 3]]
    # iota: 2 groups of 4 over 8, and transposed
    assert _groups("replica_groups=[2,4]<=[8], x") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert _groups("replica_groups=[4,2]<=[2,4]T(1,0) x") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # the mesh form: a group is the devices differing only along the named axes
    line = "replica_groups=mesh['axis_0'=16,'axis_1'=1] {'axis_0'}, use_global_device_ids=true"
    assert _groups(line) == [list(range(16))]
    line = "replica_groups=mesh['axis_0'=2,'axis_1'=8] {'axis_1'}, x"
    assert _groups(line) == [list(range(8)), list(range(8, 16))]
    line = "replica_groups=mesh['axis_0'=2,'axis_1'=8] {'axis_0'}, x"
    assert _groups(line) == [[i, i + 8] for i in range(8)]
    # device ids permuted: mesh position p holds device iota([2,8]).T.flat[p]
    line = "replica_groups=mesh['axis_0'=8,'axis_1'=2], device_ids=([2,8]T(1,0)) {'axis_0'}, x"
    ids = np.arange(16).reshape(2, 8).T.reshape(8, 2)
    assert _groups(line) == [list(ids[:, 0]), list(ids[:, 1])]
    assert _groups("all-reduce(x), to_apply=add") is None


def test_collectives_across_hosts_are_counted_apart():
    hlo = "\n".join([
        "ENTRY %main (p: f32[8]) -> f32[8] {",
        "  %p = f32[8]{0} parameter(0)",
        "  %a = f32[1024]{0} all-reduce(%p), channel_id=1, "
        "replica_groups=mesh['axis_0'=16,'axis_1'=1] {'axis_0'}, to_apply=%add",
        "  %g = f32[2048]{0} all-gather(%p), channel_id=2, "
        "replica_groups=mesh['axis_0'=2,'axis_1'=8] {'axis_1'}, dimensions={0}",
        "  %r = f32[64]{0} reduce-scatter(%p), channel_id=3, "
        "replica_groups=mesh['axis_0'=2,'axis_1'=8] {'axis_1'}, dimensions={0}",
        "  ROOT %t = f32[8]{0} copy(%p)",
        "}"])
    hosts = [i // 8 for i in range(16)]  # 2 hosts of 8
    out = program_contents(hlo, hosts)
    assert out["collectives"]["all-reduce"] == {"count": 1, "bytes": 4096}
    assert out["collectives_cross_host"]["all-reduce"] == {"count": 1, "bytes": 4096}
    assert out["collectives_cross_host"]["all-gather"]["count"] == 0  # within a host
    # a reduce-scatter's output shard times its group: the operand it reduced
    assert out["collectives"]["reduce-scatter"]["bytes"] == 64 * 4 * 8
    assert out["largest_buffer_bytes"] == 2048 * 4 and "all-gather" in out["largest_buffer"]


def test_the_gpu_step_bound_splits_nvlink_from_infiniband():
    coll = {k: {"count": 0, "bytes": 0} for k in COLLECTIVES}
    cross = {k: dict(v) for k, v in coll.items()}
    coll["all-reduce"] = {"count": 2, "bytes": 900e9 + 50e9}
    cross["all-reduce"] = {"count": 1, "bytes": 50e9}
    est = compile_report.step_time_estimate(chips.CHIPS["h100"], 0.0, None, coll, 1, cross)
    assert est["ici_s"] == pytest.approx(1.0)   # 900 GB over NVLink's 900 GB/s
    assert est["dcn_s"] == pytest.approx(1.0)   # 50 GB over a 400 Gb/s port
    assert est["step_s"] == pytest.approx(2.0) and est["bound_by"] == "interconnect"
