"""Scanned layers: which layers `nn.scan` repeats, and the two parameter layouts.

A deep stack compiles every unrolled layer separately; `nn.scan` compiles one
and loops it. Layers can only share one scanned body when they have the same
shape and the same static choices (local or global mask, RoPE base, attention
norm), so the stack is cut into

    layers [0, prefix)                 unrolled: a layer whose shape differs
                                       (ModernBERT's layer 0 has no attention norm)
    layers [prefix, prefix + G * P)    G groups of P layers, scanned; P = global_every
                                       with a local window, so every group holds the
                                       same local/global pattern
    layers [prefix + G * P, L)         unrolled: the remainder that fills no group

Parameter layouts of one Encoder (the `Plan` says which):

    unrolled: blocks_0 ... blocks_{L-1}, each one layer's tree
    scanned:  blocks_i for the unrolled layers (their own index), and
              layers/blocks_j (j < P) whose leaves carry a leading [G] axis:
              group g's member j is layer prefix + g * P + j

`stack_layers` / `unstack_layers` convert whole parameter trees (every encoder
inside them, ELECTRA's generator too); `match_layout` converts a loaded tree to
the layout of a freshly initialised one, so a checkpoint of either layout can
start a run of the other. `model.scan_layers` is plain data: "auto" (scan from
SCAN_AUTO_MIN_LAYERS layers), "true" or "false" (Python bools are accepted).
A config without the field (written before it existed) is unrolled, as its
checkpoints are.
"""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np

SCAN_AUTO_MIN_LAYERS = 12
SCAN_CHOICES = ("auto", "true", "false")
SCANNED = "layers"  # the nn.scan submodule's name, and the logical name of its axis
_BLOCK = re.compile(r"blocks_(\d+)")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which layers the scan covers: layer prefix + g * period + j is group g's member j."""
    num_layers: int
    prefix: int
    period: int
    groups: int

    @property
    def scanned(self) -> range:
        return range(self.prefix, self.prefix + self.period * self.groups)

    @property
    def unrolled(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_layers) if i not in self.scanned)

    def layer(self, group: int, member: int) -> int:
        return self.prefix + group * self.period + member


def scan_choice(cfg) -> str:
    """The normalised model.scan_layers: 'auto' | 'true' | 'false' ('false' when absent)."""
    value = cfg.get("scan_layers", False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).lower()


def plan(cfg, num_layers: int | None = None) -> Plan | None:
    """The scan plan of an encoder config, or None when its layers stay unrolled.

    num_layers overrides cfg.num_layers (an ELECTRA generator found in a tree
    may be shallower than the config it was derived from).
    """
    n = cfg.num_layers if num_layers is None else num_layers
    choice = scan_choice(cfg)
    if cfg.share_layers or choice == "false" or (choice == "auto" and n < SCAN_AUTO_MIN_LAYERS):
        return None  # ALBERT's shared block is one set of weights already
    # Layer 0 without an attention norm has a different shape: it cannot join the scan.
    prefix = 0 if cfg.get("first_attention_norm", True) else 1
    period = cfg.global_every if cfg.local_window and cfg.global_every > 0 else 1
    groups = (n - prefix) // period
    return Plan(n, prefix, period, groups) if groups >= 1 else None


# ---------------------------------------------------------------- layouts

def _block_indices(tree: dict) -> list[int]:
    return sorted(int(m.group(1)) for k in tree if (m := _BLOCK.fullmatch(k)))


def _is_encoder(tree) -> bool:
    return isinstance(tree, dict) and (SCANNED in tree or bool(_block_indices(tree)))


def _stack(trees: list):
    """Leaf-wise stack along a new axis 0, in numpy when the leaves are numpy."""
    def stack(*xs):
        return np.stack(xs) if all(isinstance(x, np.ndarray) for x in xs) else jnp.stack(xs)
    return jax.tree.map(stack, *trees)


def _plan_of(tree: dict) -> Plan:
    """The plan a scanned encoder tree was laid out with, read from its keys and shapes."""
    members = tree[SCANNED]
    period = len(members)
    groups = int(np.shape(jax.tree.leaves(members)[0])[0])
    unrolled = set(_block_indices(tree))
    n = len(unrolled) + period * groups
    prefix = min(i for i in range(n) if i not in unrolled)
    return Plan(n, prefix, period, groups)


def _stack_encoder(tree: dict, p: Plan) -> dict:
    """blocks_0..blocks_{L-1} -> blocks_i (unrolled) + layers/blocks_j [G, ...]."""
    found = _block_indices(tree)
    if found != list(range(p.num_layers)):
        raise ValueError(f"stack_layers: expected blocks_0..blocks_{p.num_layers - 1}, found "
                         f"{['blocks_%d' % i for i in found]}")
    out = {k: v for k, v in tree.items()
           if not ((m := _BLOCK.fullmatch(k)) and int(m.group(1)) in p.scanned)}
    out[SCANNED] = {f"blocks_{j}": _stack([tree[f"blocks_{p.layer(g, j)}"]
                                           for g in range(p.groups)])
                    for j in range(p.period)}
    return out


def _unstack_encoder(tree: dict) -> dict:
    """The inverse of _stack_encoder: group g's member j back to blocks_{prefix + g P + j}."""
    p = _plan_of(tree)
    out = {k: v for k, v in tree.items() if k != SCANNED}
    for j, members in enumerate(tree[SCANNED][f"blocks_{j}"] for j in range(p.period)):
        for g in range(p.groups):
            out[f"blocks_{p.layer(g, j)}"] = jax.tree.map(lambda x, g=g: x[g], members)
    return dict(sorted(out.items(), key=lambda kv: _sort_key(kv[0])))


def _sort_key(key: str):
    m = _BLOCK.fullmatch(key)
    return (1, int(m.group(1)), "") if m else (0, 0, key)


def _map_encoders(fn, tree):
    """fn applied to every encoder subtree (encoders do not nest); other nodes copied."""
    if _is_encoder(tree):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: _map_encoders(fn, v) for k, v in tree.items()}
    return tree


def stack_layers(params, cfg):
    """Unrolled (blocks_i) params -> the scanned layout cfg asks for (unchanged when none).

    Each encoder in the tree is planned with its own depth (ELECTRA's generator).
    """
    def convert(tree):
        if SCANNED in tree:
            return tree  # already scanned
        p = plan(cfg, len(_block_indices(tree)))
        return tree if p is None else _stack_encoder(tree, p)
    return _map_encoders(convert, params)


def unstack_layers(params, cfg=None):
    """Scanned params -> the unrolled blocks_i layout (what the HF family modules read).

    The layout is read from the tree itself; cfg is accepted for symmetry.
    """
    del cfg
    return _map_encoders(lambda t: _unstack_encoder(t) if SCANNED in t else t, params)


def match_layout(target, loaded):
    """`loaded` converted to the layout of `target` (a freshly initialised tree).

    Both are one encoder's params: the bridge that lets a checkpoint of one
    layout initialise a run of the other. Anything else passes through.
    """
    if not (_is_encoder(target) and _is_encoder(loaded)):
        return loaded
    if (SCANNED in target) == (SCANNED in loaded):
        return loaded  # same layout (a differing plan fails the shape check that follows)
    if SCANNED in loaded:
        loaded = _unstack_encoder(loaded)
    if SCANNED in target:
        loaded = _stack_encoder(loaded, _plan_of(target))
    return loaded
