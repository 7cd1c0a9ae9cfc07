"""What attention tells the code that traces it: the path each call is compiled to, and why
a backend could not serve a layer.

Both are decided at trace time from static facts (shapes, dtypes, the target platform), so
they are said per trace, not per step. The model keeps no record of them: a caller that
wants one passes an observer for the trace (`observed`); the compile tooling's
(encoder/aot/attention_trace.py) counts the paths per layer kind and keeps the notes. The
notes also go to the log, once per process.
"""
import contextlib
import contextvars
import functools
from typing import Protocol

from absl import logging


class Observer(Protocol):
    def took(self, path: str, layer: str, how: str) -> None: ...
    def note(self, message: str) -> None: ...


# the observers of the enclosing `observed` blocks, innermost last (a context, like the
# logical axis rules of encoder/model/sharding.py: set by the caller, read while tracing)
_OBSERVERS: contextvars.ContextVar[tuple] = contextvars.ContextVar("attention_observers",
                                                                  default=())


@contextlib.contextmanager
def observed(observer: Observer):
    """Hands `observer` every attention event traced inside the block (as well as to the
    observers of enclosing blocks). Only a trace inside the block counts: a function
    already traced (and cached by jit) before it says nothing."""
    token = _OBSERVERS.set(_OBSERVERS.get() + (observer,))
    try:
        yield observer
    finally:
        _OBSERVERS.reset(token)


def layer_kind(window: int) -> str:
    """'global', or 'local W' for a layer with a local window of W."""
    return f"local {window}" if window else "global"


def took(path: str, window: int = 0, how: str = "") -> None:
    """Says which kernel one attention call is compiled to, at the point it is dispatched:
    "splash", "pallas_gpu", "cudnn", "xla", "reference", a Pallas kernel in interpret mode
    as "splash (interpret)", attention dropout's einsum path as "reference (attention
    dropout)". `window` names the layer's kind, `how` details the call ("packed segments",
    "local blocks", "dense mask")."""
    for observer in _OBSERVERS.get():
        observer.took(path, layer_kind(window), how)


def note(message: str) -> None:
    """A backend choice or fallback: to the observers, and to the log once per process."""
    for observer in _OBSERVERS.get():
        observer.note(message)
    _log_once(message)


@functools.cache
def _log_once(message: str) -> None:
    logging.warning("attention: %s", message)
