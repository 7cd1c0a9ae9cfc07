"""The train step compiled for a TPU topology on this CPU machine (libtpu), and what a TPU
run depends on: the splash kernel compiled natively inside shard_map (its Mosaic calls
counted), no all-gather on a data-only mesh, FSDP whose all-gathers and reduce-scatters
are sized like the parameters and whose memory is below data-parallel's, and the
fine-tuning step too. Skipped where libtpu is not installed (requirements-test.txt pins it).
"""
import importlib.util

import numpy as np
import pytest

from encoder import config as config_lib

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason="libtpu is not installed (pip install -r "
                                       "requirements-test.txt): no TPU compiler to check with")

TOPOLOGY = "v5e:2x2"  # 4 chips, one host
LAYERS = 2


def _config(mesh, impl="splash"):
    """A 2-layer bf16 encoder at the kernels' smallest legal blocks (T = 128, K = 64)."""
    config = config_lib.base_config()
    config.model.update(dict(vocab_size=512, hidden_size=128, num_heads=2, intermediate_size=256,
                             num_layers=LAYERS, max_position=128, scan_layers="false",
                             attention_impl=impl, dtype="bfloat16", dropout=0.0,
                             attention_dropout=0.0))
    config.data.seq_len = 128
    # 4 rows per chip: FSDP's temp is within 10% of data-parallel's at 4 and 8 rows a chip
    # (2.7%, 4.6%), not at 2 (11.6%: one unsharded gradient is a larger share of less;
    # BUILD_NOTES, "TPU compiles")
    config.train.batch_size = 16
    config.mesh.data, config.mesh.fsdp = mesh
    return config


def _compile(config, **kwargs):
    """compile_report at the default matmul precision: conftest's process-wide `highest`
    asks Mosaic for float32 contraction of bf16 operands, which it refuses ("Bad lhs
    type") when the kernel is lowered; a TPU run does not set it."""
    import jax
    from encoder.aot import compile_report
    with jax.default_matmul_precision("default"):
        return compile_report.compile_report(config, topology=TOPOLOGY, **kwargs)


@pytest.fixture(scope="module")
def rows():
    return {name: _compile(_config(mesh)) for name, mesh in (("dp", (4, 1)), ("fsdp", (1, 4)))}


def test_splash_compiles_natively_per_chip_with_no_all_gather(rows):
    dp = rows["dp"]
    assert dp["platform"] == "tpu" and dp["chips"] == 4 and dp["fits"]
    # forward, dq and dkv: three Mosaic kernels per layer, native (no interpret-mode note)
    assert dp["attention_kernels"]["mosaic"] == 3 * LAYERS, dp["attention_kernels"]
    assert not any("interpret" in n for n in dp["attention_notes"]), dp["attention_notes"]
    assert dp["collectives"]["all-gather"]["count"] == 0, dp["collectives"]
    assert dp["collectives"]["all-reduce"]["count"] > 0  # the gradients
    assert dp["step_time"]["step_s"] > 0 and "estimate" in dp["step_time"]


def test_fsdp_gathers_parameters_and_saves_memory(rows):
    dp, fsdp = rows["dp"], rows["fsdp"]
    assert fsdp["attention_kernels"]["mosaic"] == 3 * LAYERS
    bf16_params = 2 * fsdp["parameters"]  # gathered in the compute dtype
    gathered = fsdp["collectives"]["all-gather"]["bytes"]
    scattered = fsdp["collectives"]["reduce-scatter"]["bytes"]
    # each weight gathered for the forward and again for the backward pass: 1-2.5x
    assert bf16_params <= gathered <= 2.5 * bf16_params, (gathered, bf16_params)
    # gradients reduce-scattered, about once the block weights (bf16)
    assert 0.5 * bf16_params <= scattered <= 1.5 * bf16_params, (scattered, bf16_params)
    assert fsdp["param_bytes"] < dp["param_bytes"] / 3  # 'embed' split 4 ways
    assert fsdp["peak_bytes"] < dp["peak_bytes"], (fsdp["peak_bytes"], dp["peak_bytes"])
    assert fsdp["temp_bytes"] <= 1.10 * dp["temp_bytes"], (fsdp["temp_bytes"], dp["temp_bytes"])


def test_the_fine_tuning_step_compiles_for_the_tpu_too():
    row = _compile(_config((4, 1), impl="auto"), job="finetune", task="classification")
    assert row["job"] == "finetune" and row["platform"] == "tpu"
    assert row["attention_kernels"]["mosaic"] == 3 * LAYERS
    assert row["collectives"]["all-gather"]["count"] == 0
    assert np.isfinite(row["peak_bytes"]) and row["fits"]
