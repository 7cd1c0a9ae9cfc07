"""The compile tooling's hold on a trace: the attention paths and notes a block records
(every block its own, whatever the log already said), and jax's cuDNN checks answered for
a target GPU only inside the block that compiles for it."""
import logging
import types

import jax
import jax.numpy as jnp
import pytest

from encoder.aot import attention_trace, cudnn_target
from encoder.model import attention_backends
from encoder.model.attention_pattern import AttentionPattern

B, T, H, K = 2, 128, 2, 16


def trace_bias_fallback():
    """One splash call that must fall back (a bias), traced abstractly."""
    q = jnp.zeros((B, T, H, K), jnp.float32)
    bias = jnp.zeros((B, H, T, T), jnp.float32)
    pattern = AttentionPattern(jnp.ones((B, T), jnp.int32), None, 32)
    jax.eval_shape(lambda q: attention_backends.attend(q, q, q, bias, pattern, "splash"), q)


def test_each_block_records_its_own_notes_though_the_log_says_them_once(caplog):
    with caplog.at_level(logging.WARNING):
        with attention_trace.traced() as outer:
            with attention_trace.traced() as first:
                trace_bias_fallback()
            with attention_trace.traced() as second:
                trace_bias_fallback()
    said = [r.getMessage() for r in caplog.records if "splash cannot serve" in r.getMessage()]
    assert len(said) <= 1  # once per process (zero if an earlier test said it)
    for trace in (first, second):
        assert len(trace.notes) == 1 and "additive bias" in trace.notes[0], trace.notes
        # a local layer of 32 at T = 128 is under 4 blocks: the dense path, on XLA here
        assert trace.layer_paths() == {"local 32": ["xla (dense mask)"]}
    assert outer.paths == {"xla": 2} and outer.notes == first.notes  # enclosing blocks hear all


def test_nothing_is_recorded_outside_a_block():
    trace_bias_fallback()
    with attention_trace.traced() as trace:
        pass
    assert trace.described() == "none traced" and not trace.notes


def _hopper():
    """What checks_for reads of a compiled-for GPU (an abstract device of targets.devices)."""
    return types.SimpleNamespace(compute_capability="9.0", platform="gpu")


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="a GPU host answers for itself")
def test_cudnn_checks_answer_for_the_target_inside_the_block_only():
    from jax._src.cudnn import fused_attention_stablehlo as fmha
    originals = [getattr(fmha, name) for name in cudnn_target.PATCHED]
    with cudnn_target.checks_for(_hopper()):
        assert fmha.check_compute_capability("9.0")
        assert not fmha.check_compute_capability("10.0")
        assert fmha.is_cuda_compute_capability_equal("9.0")
        assert not fmha.is_cuda_compute_capability_equal("8.0")
    assert [getattr(fmha, name) for name in cudnn_target.PATCHED] == originals
    with cudnn_target.checks_for(jax.devices()[0]):  # a CPU device: nothing to answer for
        assert [getattr(fmha, name) for name in cudnn_target.PATCHED] == originals


def test_a_failed_compile_puts_jax_checks_back():
    from jax._src.cudnn import fused_attention_stablehlo as fmha
    originals = [getattr(fmha, name) for name in cudnn_target.PATCHED]
    with pytest.raises(RuntimeError):
        with cudnn_target.checks_for(_hopper()):
            raise RuntimeError("the compile failed")
    assert [getattr(fmha, name) for name in cudnn_target.PATCHED] == originals
