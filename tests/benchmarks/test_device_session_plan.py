"""The lent GPU's session plan (benchmarks/device_session.py) parses as the commands it
runs, fits its budget in priority order, and the readers of what it leaves (the profile
reduction, the program figures) count what they say they count."""
import copy
import json
import os

import pytest
from absl import flags

import encoder.commands.bench  # noqa: F401 - declares every benchmark's flags
from benchmarks import device_session, device_tables, gpu_program, profile_step


def _parse(argv: list[str]):
    """The flags of `python -m encoder bench ...` parsed as the command would parse them
    (a copy of the flag values: the test process's own stay unparsed)."""
    assert argv[1:4] == ["-m", "encoder", "bench"], argv
    values = copy.deepcopy(flags.FLAGS)
    values(["encoder", *argv[4:]])
    return values


@pytest.mark.parametrize("cpu", [False, True])
def test_every_entry_parses_as_the_bench_command_it_runs(tmp_path, cpu):
    for entry in device_session.PLAN:
        argv = device_session.command(entry, str(tmp_path), cpu=cpu)
        if not argv:  # the accelerator rows need a GPU
            assert cpu and "--mode=device" in entry.args
            continue
        values = _parse(argv)
        assert values.mode in encoder.commands.bench.MODES
        if values.mode == "profile":
            assert values.profile_dir.startswith(str(tmp_path)), values.profile_dir
        if entry.torch:
            assert values.against.startswith("torch")
        if cpu:
            assert values.steps <= 2 and values.dtype == "float32", argv
            assert values.size == "tiny" or (values.config is not None
                                             and values.config.model.size == "tiny")


def test_the_gpu_plan_runs_the_issue_rows_first_and_the_device_rows_last():
    names = [e.name for e in device_session.PLAN]
    assert names[0] == "bert_128_torch" and names[-1] == "device"
    shapes = {(a.split("=")[1]) for e in device_session.PLAN if e.torch for a in e.args
              if a.startswith("--seq_len") or a.startswith("--phase")}
    assert shapes == {"128", "512", "stable", "extension"}, shapes
    # every PyTorch row is the bf16 GPU step, both sides
    assert all("--dtype=bfloat16" in e.args and "--against=torch" in e.args
               for e in device_session.PLAN if e.torch)
    assert len(set(names)) == len(names)


def test_entries_past_the_budget_are_skipped_and_recorded(tmp_path):
    plan = (device_session.Entry("first", 5, ("bench", "--help")),
            device_session.Entry("second", 5, ("bench", "--help")))
    records = device_session.run_plan(str(tmp_path), budget_s=device_session.MIN_ENTRY_S - 1,
                                      plan=plan)
    assert [r["status"].split(":")[0] for r in records] == ["skipped", "skipped"]
    lines = (tmp_path / "times.txt").read_text().splitlines()
    assert [json.loads(line)["entry"] for line in lines] == ["first", "second"]


def test_tables_read_a_folder_without_rows(tmp_path):
    text = device_tables.markdown(str(tmp_path))
    assert "This codebase against PyTorch" in text


# ------------------------------------------------------------------ the profile's reduction

def _event(name, ts, dur, tid=1, pid=1):
    return {"name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "ph": "X",
            "process": "/host:CPU", "thread": "worker", "args": {"hlo_op": name}}


def test_a_nested_event_gives_its_time_to_its_children():
    outer, inner1, inner2 = _event("while", 0, 10), _event("a", 1, 3), _event("b", 5, 2)
    own = {e["name"]: t for e, t in profile_step.exclusive_times([outer, inner1, inner2])}
    assert own == {"while": 5, "a": 3, "b": 2}


def test_busy_time_counts_overlapping_ops_once():
    assert profile_step.busy_time([(0, 4), (2, 6), (8, 9)]) == 7


HLO = """HloModule m

%fused_dus (p0: bf16[12,4,8], p1: bf16[1,4,8], p2: s32[]) -> bf16[12,4,8] {
  %p0 = bf16[12,4,8]{2,1,0} parameter(0)
  %p1 = bf16[1,4,8]{2,1,0} parameter(1)
  %p2 = s32[] parameter(2)
  %c = s32[] constant(0)
  ROOT %dus = bf16[12,4,8]{2,1,0} dynamic-update-slice(%p0, %p1, %p2, %c, %c)
}

%fused_ds (p0: bf16[12,4,8], p1: s32[]) -> bf16[1,4,8] {
  %p0 = bf16[12,4,8]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %c = s32[] constant(0)
  ROOT %ds = bf16[1,4,8]{2,1,0} dynamic-slice(%p0, %p1, %c, %c), dynamic_slice_sizes={1,4,8}
}

%fused_add (p0: f32[4,8], p1: f32[4,8]) -> f32[4,8] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %p1 = f32[4,8]{1,0} parameter(1)
  ROOT %add = f32[4,8]{1,0} add(%p0, %p1)
}

ENTRY %main (a: bf16[12,4,8], b: bf16[1,4,8], i: s32[], x: f32[4,8], y: f32[4,8]) -> (bf16[12,4,8], bf16[1,4,8], f32[4,8], f32[4,4]) {
  %a = bf16[12,4,8]{2,1,0} parameter(0)
  %b = bf16[1,4,8]{2,1,0} parameter(1)
  %i = s32[] parameter(2)
  %x = f32[4,8]{1,0} parameter(3)
  %y = f32[4,8]{1,0} parameter(4)
  %loop_dynamic_update_slice_fusion = bf16[12,4,8]{2,1,0} fusion(%a, %b, %i), kind=kLoop, calls=%fused_dus, metadata={op_name="jit(step)/jvp(loss)/MaskedLM/encoder/while/body/dynamic_update_slice"}
  %loop_dynamic_slice_fusion = bf16[1,4,8]{2,1,0} fusion(%a, %i), kind=kLoop, calls=%fused_ds, metadata={op_name="jit(step)/transpose(jvp(loss))/MaskedLM/encoder/while/body/dynamic_slice"}
  %loop_add_fusion = f32[4,8]{1,0} fusion(%x, %y), kind=kLoop, calls=%fused_add, metadata={op_name="jit(step)/optimizer/add"}
  %dot.1 = f32[4,4]{1,0} dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="jit(step)/jvp(loss)/MaskedLM/encoder/blocks_0/attention/qkv/dot_general"}
  ROOT %t = (bf16[12,4,8]{2,1,0}, bf16[1,4,8]{2,1,0}, f32[4,8]{1,0}, f32[4,4]{1,0}) tuple(%loop_dynamic_update_slice_fusion, %loop_dynamic_slice_fusion, %loop_add_fusion, %dot.1)
}
"""


def test_program_figures_count_slices_not_stacks_and_categorise_by_scope():
    figures = gpu_program.program_figures(HLO)
    slice_bytes = 1 * 4 * 8 * 2
    assert figures["kernels"] == 4
    assert figures["kernels_by_category"]["matrix products"] == 1
    assert figures["optimizer_kernels"] == 1
    # the in-place update reads and writes its slice, the dynamic slice reads one slice
    # and writes it (each reads its s32 index too); neither moves the [12, 4, 8] stack
    elementwise = figures["bytes_by_category"]["elementwise fusions"]
    assert elementwise == 2 * (2 * slice_bytes + 4), figures
    assert figures["bytes_by_category"]["optimizer"] == 3 * 4 * 8 * 4


def test_category_reads_the_name_stack():
    ops = profile_step.program_ops(HLO)
    assert profile_step.category(ops["loop_add_fusion"]) == "optimizer"
    assert profile_step.category(ops["dot.1"]) == "matrix products"
    assert profile_step.category(None) == "other"
    assert profile_step.in_scope("jit(step)/transpose(jvp(loss))/x", "loss")
    assert not profile_step.in_scope("jit(step)/lossy/x", "loss")


def test_the_tables_need_the_fields_the_step_rows_have():
    # a field the tables read but no benchmark writes would fail the e2e rows test;
    # here: the names are the step rows' own
    assert {"tokens_per_s", "mfu", "parameters", "loss"} <= set(device_tables.STEP_FIELDS)
    assert os.path.basename(device_session.__file__) == "device_session.py"
