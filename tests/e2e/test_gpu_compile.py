"""The train step compiled for GPU nodes on this CPU machine (XLA's CUDA compiler, beside the
runtime in .gpu_compiler/: requirements-gpu-compile.txt), and what a GPU run depends on:
cuDNN's fused attention chosen by the target's compute capability (packed documents as
segment offsets on Hopper, not a dense mask), the Triton kernel inside shard_map, local
layers on blocks, no all-gather under data parallelism, FSDP below data-parallel memory,
collectives across hosts counted apart, and no T x T buffer for a packed batch. Skipped
where the CUDA compiler is not installed.
"""
import json
import os
import subprocess
import sys

import pytest

from encoder import config as config_lib
from encoder.aot import targets
from helpers import ROOT, child_env

pytestmark = pytest.mark.skipif(
    targets._cuda_plugin() is None,  # noqa: SLF001 - the same lookup the compile makes
    reason=f"XLA's CUDA compiler is not installed ({targets.GPU_COMPILER_INSTALL})")

LAYERS = 2
T = 512


def _config(mesh=(8, 1), impl="auto", rows=16, seq_len=T, head_dim=64, window=0):
    """A 2-layer bf16 encoder on packed rows (documents masked), attention dropout 0."""
    config = config_lib.base_config()
    heads = 2
    config.model.update(dict(vocab_size=512, hidden_size=heads * head_dim, num_heads=heads,
                             intermediate_size=256, num_layers=LAYERS, max_position=seq_len,
                             scan_layers="false", attention_impl=impl, dtype="bfloat16",
                             dropout=0.0, attention_dropout=0.0, local_window=window,
                             global_every=2 if window else 1))
    config.data.seq_len = seq_len
    config.train.batch_size = rows
    config.mesh.data, config.mesh.fsdp = mesh
    return config


def _compile(config, topology="h100:8", **kwargs):
    from encoder.aot import compile_report
    return compile_report.compile_report(config, unrolled_flops=False, topology=topology,
                                         **kwargs)


def test_bench_compiles_the_tiny_recipe_for_h100s_on_cudnn():
    """The README's command: one JSON row, cuDNN's forward and backward per layer, packed
    documents as segment offsets (the path that failed to compile before: jax's check read
    the CPU host's capability), gradients all-reduced, nothing gathered."""
    proc = subprocess.run(
        [sys.executable, "-m", "encoder", "bench", "--mode=compile", "--topology=h100:8",
         "--config=experiments/pretrain.py:runlocal", f"--seq_len={T}", "--batch_size=16",
         "--dtype=bfloat16"], cwd=ROOT, env=child_env(), capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    assert row["platform"] == "gpu" and row["chips"] == 8 and row["fits"], row
    assert row["mesh"] == {"data": 8, "fsdp": 1}
    layers = row["num_layers"]
    assert row["attention_kernels"]["cudnn"] == 2 * layers, row["attention_kernels"]
    assert row["attention_layers"] == {"global": ["cudnn (packed segments)"]}, row
    # a row of more documents than cuDNN's segment slots takes Triton: both are compiled
    assert row["attention_kernels"]["triton"] == 3 * layers, row["attention_kernels"]
    assert len(row["attention_notes"]) == 1 and "Triton" in row["attention_notes"][0]
    assert row["collectives"]["all-gather"]["count"] == 0, row["collectives"]
    assert row["collectives"]["all-reduce"]["count"] > 0
    assert row["collectives_cross_host"]["all-reduce"]["count"] == 0  # one host
    assert row["step_time"]["step_s"] > 0 and "estimate" in row["step_time"]
    assert "NVLink" in row["step_time"]["interconnect"]
    assert row["phase"] == "main"


def test_the_triton_kernel_compiles_natively_inside_shard_map():
    row = _compile(_config(impl="pallas_gpu"))
    # forward, and the backward's two kernels (dq; dk and dv), per layer
    assert row["attention_kernels"]["triton"] == 3 * LAYERS, row["attention_kernels"]
    assert row["attention_ran"] == "pallas_gpu"  # not "(interpret)"
    assert row["collectives"]["all-gather"]["count"] == 0, row["collectives"]


def test_a_packed_batch_takes_no_t_by_t_buffer():
    """At T = 2,048 a single bf16 T x T score of one head is 8 MiB; the cuDNN path's
    largest buffer is an activation, the dense XLA path's a T x T tensor."""
    t = 2048
    kernel = _compile(_config(rows=8, seq_len=t))
    dense = _compile(_config(rows=8, seq_len=t, impl="xla"))
    square = 2 * t * t  # bytes of one bf16 [T, T]
    assert kernel["attention_layers"] == {"global": ["cudnn (packed segments)"]}
    assert kernel["largest_buffer_bytes"] < square, kernel["largest_buffer"]
    assert dense["largest_buffer_bytes"] >= square, dense["largest_buffer"]
    assert kernel["temp_bytes"] < dense["temp_bytes"] / 4, (kernel["temp_bytes"],
                                                            dense["temp_bytes"])


def test_local_layers_run_on_blocks_and_global_layers_packed():
    """ModernBERT's pattern (a 128-token window on every other layer) on kernels at
    T = 1,024: no dense mask anywhere, no T x T buffer."""
    t = 1024
    row = _compile(_config(rows=8, seq_len=t, window=128))
    assert row["attention_layers"] == {"global": ["cudnn (packed segments)"],
                                       "local 128": ["cudnn (local blocks)"]}, row
    assert row["attention_kernels"]["cudnn"] == 2 * LAYERS
    heads = 2
    assert row["largest_buffer_bytes"] < 2 * heads * t * t, row["largest_buffer"]  # bf16 H x T x T
    assert f"{t},{t}" not in row["largest_buffer"], row["largest_buffer"]


def test_head_dim_256_takes_cudnn_on_hopper_and_is_refused_on_ampere():
    """jax allows head dims to 256 on Hopper: the choice reads the target's capability."""
    hopper = _compile(_config(rows=8, head_dim=256))
    assert hopper["attention_kernels"]["cudnn"] == 2 * LAYERS, hopper["attention_notes"]
    ampere = _compile(_config(rows=8, head_dim=256), topology="a100:8")
    assert ampere["attention_kernels"]["cudnn"] == 0
    assert ampere["attention_ran"] == "xla"
    assert any("head dim <= 128 on this GPU" in n for n in ampere["attention_notes"])
    assert ampere["chip_hbm_bytes"] == 80 * 10**9


def test_ampere_takes_packed_rows_on_triton_and_says_why():
    """cuDNN's packed layout needs Hopper: on an A100 packed documents take the Triton
    kernel (segment ids), not a dense mask; at head dim 256, which Triton cannot take,
    the dense mask, named."""
    row = _compile(_config(rows=8), topology="a100:8")
    assert row["attention_layers"] == {"global": ["pallas_gpu"]}, row
    assert row["attention_kernels"] == {"mosaic": 0, "triton": 3 * LAYERS, "cudnn": 0}
    assert any("the target's is 8.0: packed documents take the Triton kernel" in n
               for n in row["attention_notes"]), row["attention_notes"]


def test_fsdp_over_gpus_saves_memory():
    dp = _compile(_config(mesh=(8, 1), rows=32))
    fsdp = _compile(_config(mesh=(1, 8), rows=32))
    assert fsdp["param_bytes"] < dp["param_bytes"] / 3
    assert fsdp["peak_bytes"] < dp["peak_bytes"], (fsdp["peak_bytes"], dp["peak_bytes"])
    assert fsdp["collectives"]["all-gather"]["count"] > 0
    assert fsdp["attention_kernels"]["cudnn"] == 2 * LAYERS


def test_two_hosts_count_the_collectives_that_cross_them():
    """h100:2x8 with the batch over all 16 GPUs: the gradient all-reduce spans both hosts
    (InfiniBand); with FSDP inside each host and data across, the parameter all-gathers
    stay on NVLink."""
    row = _compile(_config(mesh=(2, 8), rows=32), topology="h100:2x8")
    assert row["chips"] == 16
    cross, total = row["collectives_cross_host"], row["collectives"]
    assert cross["all-reduce"]["count"] > 0, cross
    assert total["all-gather"]["count"] > 0 and cross["all-gather"]["count"] == 0, (total, cross)
    assert row["step_time"]["dcn_s"] > 0


def test_the_fine_tuning_step_compiles_for_gpus_too():
    row = _compile(_config(rows=8, impl="auto"), job="finetune", task="classification")
    assert row["job"] == "finetune" and row["fits"]
    assert row["attention_kernels"]["cudnn"] == 2 * LAYERS, row["attention_notes"]


def test_the_compiler_loaded_after_jax_started_knows_the_kernels_partitioners():
    """A busy test worker (or a notebook) has started jax and imported custom_partitioning
    before the CUDA compiler is loaded by hand: the kernels' shard_map partitioners must
    still be registered for CUDA (they were not: "No registered implementation for custom
    call to CustomSPMDPartitioning for platform CUDA")."""
    code = ("import jax; jax.devices(); import jax.experimental.custom_partitioning\n"
            "import sys; sys.path[:0] = ['tests', 'tests/e2e']\n"
            "import test_gpu_compile as t\n"
            "t.test_local_layers_run_on_blocks_and_global_layers_packed(); print('compiled')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-2000:]
