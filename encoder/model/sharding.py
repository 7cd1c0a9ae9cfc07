"""What the model sees of the device mesh: its platform, activation constraints by logical
name, and shard_map over the batch for kernels that cannot be partitioned automatically.

The model never names a physical mesh axis. The trainer traces the step under two
contexts (encoder/train/partitioning.py `activation_context`):

  * jax's abstract mesh (`jax.sharding.use_abstract_mesh`), which carries the mesh's axis
    sizes and the platform of its devices (abstract_device.platform);
  * the logical axis rules (`logical_rules(rules)` here, a table of flax's
    (logical name, mesh axes) pairs), which map the logical names used here ('batch',
    'length', 'act_embed', ...) onto those axes. Not flax's own `nn.logical_axis_rules`
    context: under it flax also constrains every boxed parameter as it is unboxed, which
    fails for DenseGeneral's reshaped kernels.

Outside both (a single device, tests, `encode`), every function here is the identity:
no constraint, no shard_map, and the platform is jax.default_backend().

Axes: B batch, T tokens, D model width, H heads, K head dim.
"""
import contextlib
import contextvars
import os
from typing import Callable, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import PartitionSpec as P


_RULES: contextvars.ContextVar[tuple] = contextvars.ContextVar("logical_rules", default=())
_CAPABILITY: contextvars.ContextVar[str | None] = contextvars.ContextVar("capability",
                                                                        default=None)


@contextlib.contextmanager
def logical_rules(rules):
    """The (logical name, mesh axes) table the activations are constrained by."""
    token = _RULES.set(tuple(rules))
    try:
        yield
    finally:
        _RULES.reset(token)


@contextlib.contextmanager
def target_device(device):
    """The device the step is compiled for (the mesh's first), whose CUDA compute capability
    the GPU kernels are chosen by: a GPU compiled for on a CPU machine has no host backend
    to ask (jax's own cuDNN checks read the host's)."""
    token = _CAPABILITY.set(getattr(device, "compute_capability", None))
    try:
        yield
    finally:
        _CAPABILITY.reset(token)


def target_capability() -> tuple[int, int] | None:
    """The target GPU's compute capability, e.g. (9, 0); None off a GPU. Read from the
    compiled-for device (target_device), else from the host's first GPU."""
    text = _CAPABILITY.get()  # set from a GPU device only (others have no capability)
    if text is None and target_platform() == "gpu" and jax.default_backend() == "gpu":
        text = getattr(jax.devices()[0], "compute_capability", None)
    if not text:
        return None
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def current_mesh():
    """The abstract mesh the step is traced for, or None (no mesh context)."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh is None or mesh.empty else mesh


def target_platform() -> str:
    """'tpu' | 'gpu' | 'cpu': the platform of the devices the step is compiled for.

    Compiling for a TPU topology on a CPU machine answers 'tpu' (the mesh's abstract
    devices), so kernels are compiled natively rather than in Pallas interpret mode.
    """
    mesh = current_mesh()
    device = getattr(mesh, "abstract_device", None) if mesh is not None else None
    if device is not None and getattr(device, "platform", None):
        return device.platform
    return jax.default_backend()


def _active() -> bool:
    return current_mesh() is not None and bool(_RULES.get())


def _axes(entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def mesh_spec(names: Sequence[str | None], shape: Sequence[int]) -> P:
    """Logical names -> a PartitionSpec on the current mesh; an axis that does not divide
    its dimension (or has size 1) is dropped, so a small batch stays correct."""
    mesh = current_mesh()
    spec = nn.logical_to_mesh_axes(tuple(names), _RULES.get())
    out = []
    for dim, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        kept = tuple(a for a in _axes(entry) if a in mesh.axis_names and mesh.shape[a] > 1)
        size = int(np.prod([mesh.shape[a] for a in kept])) if kept else 1
        out.append(kept if kept and dim % size == 0 else None)
    return P(*out)


# Measurement switch only (the compile report's before/after in BUILD_NOTES): set to drop
# every activation constraint.
NO_CONSTRAINTS_ENV = "ENCODER_NO_ACTIVATION_CONSTRAINTS"


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
    """x sharded as its logical names say (MaxText's activation constraints); identity
    without a mesh context. Keeps the SPMD partitioner from re-laying activations out
    along a parameter's FSDP axis (which costs gathers of whole activations)."""
    if not _active() or os.environ.get(NO_CONSTRAINTS_ENV):
        return x
    return jax.lax.with_sharding_constraint(x, mesh_spec(names, x.shape))


def batch_sharded(fn: Callable, *args, batch_dims: Sequence[int] | None = None):
    """fn(*args) inside jax.shard_map over the mesh axes the logical 'batch' maps to.

    Every arg is split along its batch dimension (dimension 0 unless batch_dims says
    otherwise; None leaves an arg whole), the output along dimension 0, so each chip runs
    the kernel on its own rows: Mosaic kernels cannot be partitioned by XLA, and a Triton
    call left to GSPMD gathers its operands to the whole global batch. Identity (a plain
    call) without a mesh context or when the batch is not split.
    """
    if not _active():
        return fn(*args)
    dims = list(batch_dims) if batch_dims is not None else [0] * len(args)
    leading = next(a.shape[d] for a, d in zip(args, dims) if a is not None and d is not None)
    axes = mesh_spec(("batch",), (leading,))[0]
    if not axes:
        return fn(*args)

    def spec(a, d):
        if a is None or d is None:
            return P()
        return P(*([None] * d + [axes]))

    in_specs = tuple(spec(a, d) for a, d in zip(args, dims))
    return jax.shard_map(fn, mesh=current_mesh(), in_specs=in_specs, out_specs=P(axes),
                         check_vma=False)(*args)
