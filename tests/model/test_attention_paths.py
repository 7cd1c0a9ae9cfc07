"""What attention ran, not what was asked: each call says the path it is compiled to where it
is dispatched, `attention_trace.traced()` counts them, and a benchmark row names it."""

import ast
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import device
from encoder.aot import attention_trace
from encoder.model import attention_backends, encoder
from encoder.model.attention_pattern import AttentionPattern
from helpers import ROOT

B, T, H, K = 2, 128, 2, 16


def traced_paths(impl, bias=None, dtype=jnp.float32) -> str:
    """The paths one attend() call takes, traced abstractly (nothing compiles or runs)."""
    q = jnp.zeros((B, T, H, K), dtype)
    pad = jnp.ones((B, T), jnp.int32)
    pattern = AttentionPattern(pad, None, 0)
    with attention_trace.traced() as trace:
        jax.eval_shape(lambda q, k, v: attention_backends.attend(q, k, v, bias, pattern, impl),
                       q, q, q)
    return attention_trace.describe_paths(trace.paths)


@pytest.mark.parametrize("impl, ran", [
    ("xla", "xla"), ("reference", "reference"),
    ("cudnn", "xla"),                         # no cuDNN on a CPU: the same call runs on XLA
    ("auto", "xla"),                          # auto on a CPU
    ("splash", "splash (interpret)"),         # a TPU kernel compiled for a CPU
    ("pallas_gpu", "pallas_gpu (interpret)"),
])
def test_each_backend_names_the_path_it_was_compiled_to(impl, ran):
    assert traced_paths(impl) == ran


def test_a_kernel_that_cannot_serve_a_bias_is_named_as_the_dense_path_that_ran():
    bias = jnp.zeros((B, H, T, T), jnp.float32)
    assert traced_paths("splash", bias) == "xla"
    assert traced_paths("pallas_gpu", bias) == "xla"


def test_attention_dropout_is_named_and_nothing_outside_the_block_counts():
    cfg = _tiny_cfg(attention_impl="splash", attention_dropout=0.1)
    ids = jnp.ones((B, T), jnp.int32)
    pad = jnp.ones((B, T), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    model = encoder.Encoder(cfg)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), ids, None, pad, pos))
    with attention_trace.traced() as training:
        jax.eval_shape(lambda p: model.apply(p, ids, None, pad, pos, deterministic=False,
                                             rngs={"dropout": jax.random.PRNGKey(1)}), params)
    with attention_trace.traced() as serving:
        jax.eval_shape(lambda p: model.apply(p, ids, None, pad, pos), params)
    assert attention_trace.describe_paths(training.paths) == "reference (attention dropout)"
    assert attention_trace.describe_paths(serving.paths) == "splash (interpret)"
    assert sum(training.paths.values()) == cfg.num_layers  # unscanned: one trace per layer
    with attention_trace.traced() as nothing:
        pass
    assert attention_trace.describe_paths(nothing.paths) == "none traced"


def test_a_device_row_that_fell_back_says_it_did_not_run_as_asked():
    assert device.as_asked({"attention_impl": "cudnn", "attention_ran": "xla"}) == {
        "attention_as_asked": False}
    assert device.as_asked({"attention_impl": "cudnn", "attention_ran": "cudnn"}) == {
        "attention_as_asked": True}
    assert device.as_asked({"attention_impl": "auto", "attention_ran": "xla"}) == {}


def _tiny_cfg(**overrides):
    from encoder import config as config_lib
    from encoder.model import models
    cfg = config_lib.model_config("tiny")
    cfg.update(dict(vocab_size=101, hidden_size=32, num_heads=H, intermediate_size=64,
                    max_position=T, dropout=0.0, attention_dropout=0.0, type_vocab_size=0,
                    num_layers=2, position="rope", scan_layers="false"))
    cfg.update(overrides)
    models.validate_config(cfg, T)
    return models.freeze(cfg)


def test_paths_are_counted_per_trace_not_per_step():
    """A jitted function traced once and called again adds nothing: the count is of traces."""
    q = jnp.asarray(np.zeros((B, T, H, K)), jnp.float32)
    fn = jax.jit(lambda q: attention_backends.attend(q, q, q, None, None, "xla"))
    with attention_trace.traced() as trace:
        fn(q)
        fn(q)
    assert dict(trace.paths) == {"xla": 1}


EMPTY_CONTAINERS = {"list", "set", "dict", "Counter", "defaultdict", "deque"}


def _starts_empty(value) -> bool:
    """An empty list/set/dict literal or an argument-free container call: a module global
    meant to be filled later."""
    if isinstance(value, (ast.List, ast.Set)):
        return not value.elts
    if isinstance(value, ast.Dict):
        return not value.keys
    if isinstance(value, ast.Call) and not value.args and not value.keywords:
        name = getattr(value.func, "attr", getattr(value.func, "id", ""))
        return name in EMPTY_CONTAINERS
    return False


def test_the_model_keeps_no_record_of_its_traces():
    """No module of encoder/model/ holds a module-level container that fills up while a step
    is traced: what a trace said is kept by whoever listens (encoder/aot/attention_trace.py)."""
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "encoder", "model")):
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            for node in ast.parse(open(path).read()).body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and _starts_empty(node.value):
                    found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not found, found
