"""LoRA (Hu et al. 2021): W + (alpha / r) A B on the attention and MLP kernels.

The adapters live beside the model's parameters ({'model': ..., 'lora': ...});
`merge` folds them into the frozen kernels inside the step (a pure function of
both trees), so the encoder code knows nothing about them.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

TARGETS = ("attention/qkv/kernel", "attention/out/kernel", "mlp/wi/kernel", "mlp/wo/kernel")
# Number of leading kernel axes that form the input dimension.
_IN_AXES = {"attention/qkv/kernel": 1, "attention/out/kernel": 2, "mlp/wi/kernel": 1,
            "mlp/wo/kernel": 1}


def flat(tree, prefix=""):
    """('a/b/c', leaf) for every leaf of a nested dict."""
    for k, v in tree.items():
        path = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            yield from flat(v, path)
        else:
            yield path, v


def init(rng, encoder_shapes, rank: int):
    """{'path': {'a': [in, r], 'b': [r, out]}} for every targeted kernel; b starts at 0."""
    adapters = {}
    for path, w in flat(encoder_shapes):
        target = next((t for t in TARGETS if path.endswith(t)), None)
        if target is None:
            continue
        n_in = int(np.prod(w.shape[:_IN_AXES[target]]))
        n_out = int(np.prod(w.shape[_IN_AXES[target]:]))
        rng, key = jax.random.split(rng)
        adapters[path] = {"a": jax.random.normal(key, (n_in, rank)) / math.sqrt(n_in),
                          "b": jnp.zeros((rank, n_out))}
    if not adapters:
        raise ValueError("LoRA found no attention/MLP kernel to adapt")
    return adapters


def merge(encoder_params, adapters, scale: float):
    """W + scale * A B for every adapted kernel."""
    def walk(tree, prefix=""):
        out = {}
        for k, v in tree.items():
            path = f"{prefix}/{k}" if prefix else k
            if isinstance(v, dict):
                out[k] = walk(v, path)
            elif path in adapters:
                delta = adapters[path]["a"] @ adapters[path]["b"]
                out[k] = v + scale * delta.reshape(v.shape).astype(v.dtype)
            else:
                out[k] = v
        return out
    return walk(encoder_params)


def effective(tree, alpha: float, rank: int):
    """The model's parameters with any adapters merged in: {'encoder', 'head'}."""
    if "lora" not in tree:
        return tree["model"]
    model = dict(tree["model"])
    model["encoder"] = merge(model["encoder"], tree["lora"], alpha / rank)
    return model
