"""The attention backends: one table (BACKENDS), one choice (`auto`), one entry point (`attend`).

  name        kernel                                 pattern it takes (attention_pattern.py)
  xla         jax.nn.dot_product_attention on XLA    dense [B, 1, T, T] mask, folded into the bias
  reference   einsums, float32 softmax               dense mask; attention dropout; tests' reference
  cudnn       cuDNN via jax.nn.dot_product_attention key lengths for right padding; documents
                                                     as cuDNN segment offsets (Hopper GPUs);
                                                     a (bidirectional) window on local blocks
  splash      Pallas TPU splash attention            segment ids + a block-sparse local mask
  pallas_gpu  Pallas Triton flash attention (mha)    segment ids (no window, no bias)
  auto        TPU: splash; GPU: cudnn (bf16/fp16, K <= 128; 256 on Hopper); else xla

dense.py holds xla, reference and the fallback; cudnn.py; pallas.py holds splash and
pallas_gpu. The platform (native kernel or interpret mode, and `auto`'s choice) is the one
the step is compiled for: the mesh's devices (encoder/model/sharding.py), not the host's;
so is a GPU's compute capability.

A layer a backend cannot serve (an additive position bias, attention dropout, a sequence
length off the kernel's blocks, a dtype it lacks) takes the dense path and the reason is
said once (events.py). What each call was compiled to is said where it is dispatched, so
the benchmark rows and the compile report name the path that ran, not only the one asked
for. Off their platform the Pallas kernels run in Pallas interpret mode and cudnn runs the
same call on XLA, so CPU tests check every backend against `reference`.

Axes: B batch, T tokens, H heads, K head dim.
"""
import dataclasses
from typing import Any

from encoder.model import sharding
from encoder.model.attention_backends import cudnn, dense, events, pallas
from encoder.model.attention_pattern import AttentionPattern


@dataclasses.dataclass(frozen=True)
class Backend:
    """run(q, k, v, bias, pattern) -> [B, T, H, K]; refuse(q, bias, pattern) -> a reason or None.

    refuse reads only static facts (shapes, dtypes, the platform, whether a
    bias or window exists), so the choice is made once at trace time.
    """
    run: Any
    refuse: Any = lambda q, bias, pattern: None


BACKENDS: dict[str, Backend] = {
    "xla": Backend(dense.run_xla),
    "reference": Backend(dense.run_reference),
    "cudnn": Backend(cudnn.run_cudnn, cudnn.refuse_cudnn),
    "splash": Backend(pallas.run_splash, pallas.refuse_splash),
    "pallas_gpu": Backend(pallas.run_pallas_gpu, pallas.refuse_pallas_gpu),
}
IMPLEMENTATIONS = ("auto", *BACKENDS)


def choose_backend(implementation: str, q, bias, pattern: AttentionPattern) -> str:
    """`auto`: splash on TPU, cuDNN on GPU in half precision, else XLA, where each can serve.

    pallas_gpu is never chosen by auto: cuDNN is NVIDIA's tuned kernel, and the
    two have not been measured against each other here.
    """
    if implementation != "auto":
        return implementation
    platform = sharding.target_platform()
    if platform == "tpu":
        reason = pallas.refuse_splash(q, bias, pattern)
        if reason is None:
            return "splash"
        events.note(f"attention_impl=auto on tpu: {reason}; using xla")
    if platform == "gpu":
        reason = cudnn.refuse_cudnn(q, bias, pattern)
        if reason is None:
            return "cudnn"
        events.note(f"attention_impl=auto on gpu: {reason}; using xla (dense)")
    return "xla"


def attend(q, k, v, bias=None, pattern: AttentionPattern | None = None,
           implementation: str = "auto"):
    """softmax(q k^T / sqrt(K) + bias) v [B, T, H, K] under `pattern`, by the named backend.

    A layer the backend cannot serve takes the dense-mask path, and the reason
    is said once: never a silently different computation.
    """
    pattern = AttentionPattern() if pattern is None else pattern
    name = choose_backend(implementation, q, bias, pattern)
    backend = BACKENDS[name]
    reason = backend.refuse(q, bias, pattern)
    if reason is not None:
        events.note(f"attention_impl={name} cannot serve this layer: {reason}; "
                    "falling back to the dense-mask path (local blocks for a window)")
        return dense.run_dense(q, k, v, bias, pattern)
    return backend.run(q, k, v, bias, pattern)
