"""The device mesh and the logical-axis rules that map parameters and activations onto it.

Model code names parameter axes logically ('embed', 'mlp', 'vocab', ...) and activation
axes too ('batch', 'length', 'act_embed', ...: encoder/model/sharding.py); RULES maps them
to mesh axes. The mesh has a `data` axis (batch only) and an `fsdp` axis (batch and the
parameters' `embed` axis, so parameters and optimizer state are sharded ZeRO-3 style).
Activations are split over the batch only (data x fsdp, as MaxText's `activation_batch`):
without that constraint the SPMD partitioner follows the parameters' `embed` split into
the activations and gathers them back (BERT-base FSDP measured 3x data-parallel's temp).
An axis whose size is not divisible by its mesh axes stays replicated.

The step is traced under `activation_context(mesh)` (jax's abstract mesh + the logical
rules): that is how the model reads the mesh without naming a physical axis.
"""
import contextlib
import functools

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from encoder.model import sharding

MESH_AXES = ("data", "fsdp")
BATCH_AXES = ("data", "fsdp")
RULES = (
    ("batch", BATCH_AXES),
    ("embed", "fsdp"),
    ("layers", None),  # scanned layers' leading axis (encoder/model/scan.py): never split
    # activations: only the batch (above) is split; every other axis is whole on each chip
    ("length", None),
    ("act_embed", None),
    ("act_heads", None),
    ("act_kv", None),
    ("act_mlp", None),
)


@contextlib.contextmanager
def activation_context(mesh: Mesh):
    """The mesh and the logical rules the model reads while a step is traced
    (encoder/model/sharding.py). Enterable inside jit: it sets the abstract mesh only."""
    with (jax.sharding.use_abstract_mesh(mesh.abstract_mesh), sharding.logical_rules(RULES),
          sharding.target_device(mesh.devices.flat[0])):
        yield


def traced_under(fn, mesh: Mesh):
    """fn traced (whenever jit traces it) under activation_context(mesh)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with activation_context(mesh):
            return fn(*args, **kwargs)
    return wrapped


def make_mesh(mesh_cfg, devices=None) -> Mesh:
    """Mesh from axis sizes; one size may be -1 (fills the remaining devices)."""
    devices = list(devices if devices is not None else jax.devices())
    sizes = [int(mesh_cfg[a]) for a in MESH_AXES]
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got {dict(zip(MESH_AXES, sizes))}")
    known = int(np.prod([s for s in sizes if s != -1]))
    if -1 in sizes:
        if len(devices) % known:
            raise ValueError(f"{len(devices)} devices are not divisible by the fixed mesh axes "
                             f"{dict(zip(MESH_AXES, sizes))}")
        sizes[sizes.index(-1)] = len(devices) // known
    if int(np.prod(sizes)) != len(devices):
        raise ValueError(f"mesh {dict(zip(MESH_AXES, sizes))} needs {int(np.prod(sizes))} "
                         f"devices; {len(devices)} are available")
    return Mesh(np.asarray(devices).reshape(sizes), MESH_AXES)


def _fit(spec: P, shape, mesh: Mesh) -> P:
    """Replaces mesh axes that do not divide the dimension with None."""
    out = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        names = (axes,) if isinstance(axes, str) else (axes or ())
        size = int(np.prod([mesh.shape[a] for a in names])) if names else 1
        out.append(axes if names and dim % size == 0 else None)
    return P(*out)


def param_shardings(boxed_abstract, mesh: Mesh):
    """NamedShardings for a tree of (boxed, abstract) params from eval_shape(init)."""
    logical = nn.get_partition_spec(boxed_abstract)
    physical = nn.logical_to_mesh(logical, RULES)
    shapes = nn.unbox(boxed_abstract)
    return jax.tree.map(lambda spec, x: NamedSharding(mesh, _fit(spec, x.shape, mesh)),
                        physical, shapes, is_leaf=lambda x: isinstance(x, P))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def shard_batch(batch: dict, mesh: Mesh) -> dict:
    """Process-local numpy batch -> global arrays sharded over the batch axes."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
            for k, v in batch.items()}
