"""Which user-level call built each node, so kernels can say what they compute.

A graph of primitives forgets that six of its nodes were one `softmax`. The Tensor API's public
calls are wrapped by `user_op`: the outermost call records an `Origin` (the op's name and the
file:line of the user code that called it), and every node built until it returns carries that
origin. Kernel names (`k2_softmax`) and kernel comments come from it. The cost is one frame walk
per user call, none per node.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Optional

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FRAMES = 12  # how far up the stack to look for the user's line (past refcomp's own frames)


@dataclass(frozen=True)
class Origin:
    op: str  # the user-level op: "softmax", "layer_norm", "add"
    where: str = ""  # "model.py:42": the user's call, by file name and line ("" when not built from Python)


_state = threading.local()


def current() -> Optional[Origin]:
    """The origin of nodes built now: that of the outermost user call in progress, if any."""
    return getattr(_state, "origin", None)


def _caller() -> str:
    """file:line of the nearest frame outside refcomp (a deterministic label: the file's name only)."""
    frame = sys._getframe(2)
    for _ in range(_FRAMES):
        if frame is None:
            break
        if not frame.f_code.co_filename.startswith(_PACKAGE):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def user_op(fn: Optional[Callable] = None, *, name: Optional[str] = None):
    """Decorate a public Tensor method or rc function: nodes it builds carry its name."""
    if fn is None:
        return lambda f: user_op(f, name=name)
    op = name or fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if getattr(_state, "origin", None) is not None:  # inside another user op: that one names the nodes
            return fn(*args, **kwargs)
        _state.origin = Origin(op, _caller())
        try:
            return fn(*args, **kwargs)
        finally:
            _state.origin = None

    call.user_op = op
    return call


@contextlib.contextmanager
def building(origin: Optional[Origin]):
    """Nodes built inside the block carry `origin`, whatever Tensor calls build them: an importer
    names each imported op after the model's own module and source line (`h.0.attn`, `model.py:41`)
    rather than after the refcomp calls it is made of, or the importer's line."""
    previous = getattr(_state, "origin", None)
    _state.origin = origin
    try:
        yield
    finally:
        _state.origin = previous
