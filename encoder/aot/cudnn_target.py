"""jax's cuDNN checks answered for the GPU a step is compiled for, not the host.

jax's cuDNN wrapper (jax._src.cudnn.fused_attention_stablehlo, private) asks the host's
backend for the GPU's compute capability and cuDNN version, when a cuDNN call is traced and
again when its gradient rule runs (later in the step's trace). Compiling for a GPU node on
a machine without one (the compile report), the host is a CPU, and Hopper-only layouts
(packed documents, head dim 256) are refused for an H100 target. Inside `checks_for(device)`
the three checks answer from the target device's capability and from the cuDNN the CUDA
compiler loads; on a GPU host, or for a device that is not a GPU, nothing is replaced.
"""
import contextlib
import importlib

import jax

PATCHED = ("check_compute_capability", "is_cuda_compute_capability_equal",
           "check_cudnn_version")


def parse_capability(text: str) -> tuple[int, int]:
    """'9.0' -> (9, 0)."""
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def _answers(target: tuple[int, int]) -> dict:
    def check_compute_capability(capability):
        return target >= parse_capability(capability)

    def is_cuda_compute_capability_equal(capability):
        return target == parse_capability(capability)

    def check_cudnn_version():
        return importlib.import_module("jax_cuda12_plugin._versions").cudnn_get_version()

    return {"check_compute_capability": check_compute_capability,
            "is_cuda_compute_capability_equal": is_cuda_compute_capability_equal,
            "check_cudnn_version": check_cudnn_version}


@contextlib.contextmanager
def checks_for(device):
    """Inside the block, jax's cuDNN checks answer for `device` (a GPU compiled for from a
    host without one); jax's own checks are put back on leaving it."""
    capability = getattr(device, "compute_capability", None)
    if not capability or jax.default_backend() == "gpu":
        yield
        return
    from jax._src.cudnn import fused_attention_stablehlo as fmha  # private: the checks
    originals = {name: getattr(fmha, name) for name in PATCHED}
    for name, answer in _answers(parse_capability(capability)).items():
        setattr(fmha, name, answer)
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(fmha, name, original)
