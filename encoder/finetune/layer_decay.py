"""Layer-wise learning-rate decay (ELECTRA, Clark et al. 2020 §A): lower layers move less.

Layer l's updates are scaled by decay^(L + 1 - layer(l)): the head keeps the
full rate, block L-1 gets decay, ..., the embeddings decay^(L+1).
"""
import re

import jax
import optax


def layer_of(path: tuple[str, ...], num_layers: int) -> int:
    """0 for embeddings, l+1 for block l, num_layers+1 for the head (and anything else)."""
    names = "/".join(path)
    m = re.search(r"blocks_(\d+)", names)
    if m:
        return int(m.group(1)) + 1
    if "shared_block" in names:
        return num_layers
    if "/embed" in names:  # the tables, their norm and the E -> D projection
        return 0
    return num_layers + 1


def multipliers(params, num_layers: int, decay: float):
    """A tree of update scales for a {'model': ..., 'lora'?: ...} parameter tree."""
    def mult(path, _):
        keys = tuple(getattr(p, "key", str(p)) for p in path)
        if keys[0] != "model":
            return 1.0
        return decay ** (num_layers + 1 - layer_of(keys[1:], num_layers))
    return jax.tree_util.tree_map_with_path(mult, params)


def scale_updates(params, num_layers: int, decay: float) -> optax.GradientTransformation:
    """A stateless transformation multiplying each update by its layer's scale."""
    mults = multipliers(params, num_layers, decay)
    return optax.stateless(lambda updates, _: jax.tree.map(lambda u, m: u * m, updates, mults))
