"""What the step's attention was compiled to, recorded while it is traced.

The attention backends say, where each call is dispatched, which path it took and why a
kernel was not used (encoder/model/attention_backends/events.py); `traced()` records it
for one block: the compile report's `attention_ran`, `attention_layers` and
`attention_notes`, and the benchmark rows', name what ran, not only what was asked.
"""
import collections
import contextlib
import dataclasses

from encoder.model.attention_backends import events


@dataclasses.dataclass
class AttentionTrace:
    """The attention paths traced inside a `traced()` block.

    paths: path -> calls traced ("splash": 2); layers: layer kind ("global", "local 128")
    -> {path (detail): calls}; notes: every backend choice or fallback said, once each.
    A scanned group and a rematerialised layer are traced more than once, so call counts
    are not layer counts.
    """
    paths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    layers: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)

    def took(self, path: str, layer: str, how: str) -> None:
        self.paths[path] += 1
        entry = f"{path} ({how})" if how else path
        self.layers.setdefault(layer, collections.Counter())[entry] += 1

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def described(self) -> str:
        return describe_paths(self.paths)

    def layer_paths(self) -> dict:
        """{layer kind: sorted paths}: which kernel each kind of layer took."""
        return {kind: sorted(paths) for kind, paths in sorted(self.layers.items())}


@contextlib.contextmanager
def traced():
    """Records the attention traced inside the block: an AttentionTrace."""
    with events.observed(AttentionTrace()) as trace:
        yield trace


def describe_paths(counts) -> str:
    """Paths as one field: "splash", "splash + xla", or "none traced"."""
    return " + ".join(sorted(counts)) or "none traced"
