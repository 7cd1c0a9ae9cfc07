"""One helper for the per-axis variant tables (positions, activations, pooling, ...).

Each axis is a plain dict from name to implementation, defined in the module
that owns the axis. This helper only turns an unknown name into an error that
lists the valid ones.
"""
from typing import Mapping, TypeVar

T = TypeVar("T")


def lookup(table: Mapping[str, T], name: str, axis: str) -> T:
    """Returns table[name]; an unknown name raises listing the valid names."""
    if name not in table:
        raise ValueError(
            f"Unknown {axis} {name!r}; valid names: {', '.join(sorted(table))}")
    return table[name]
