"""How much memory an executor has, and the error for a run that would not fit.

NumPy raises MemoryError for an impossible array, or, under Linux's overcommit, hands out memory
that the machine then swaps or kills the process for while it is filled. Both are worse than a
refusal that says how many bytes the run needs and which tensor needs them, so the reference and
the program runner check their sizes against this before they allocate. A shape too large to index at all
(`require_indexable`) is refused when a graph is compiled, before its kernels are priced.
"""
from __future__ import annotations

import functools
import os
from typing import Mapping

from ..errors import AllocationError
from ..ops.dtypes import DTYPES
from ..symbolic.dims import evaluate_dim


@functools.lru_cache(maxsize=None)
def host_memory_bytes() -> int:
    """Physical memory of this machine (a generous bound when the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def show_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:.1f} {unit})"
    return f"{n:,} bytes"


def require(nbytes: int, capacity: int, what: str, where: str) -> None:
    """Refuse `what` when it needs more than `capacity` bytes of `where`."""
    if nbytes > capacity:
        raise AllocationError(
            f"{what} needs {show_bytes(nbytes)}, more than {where} has ({show_bytes(capacity)})"
        )


# Kernels index in signed 64-bit arithmetic (`long long`) and the cost model counts elements, bytes
# and sectors in int64: a count up to 2^60 leaves room for byte offsets of items of up to 8 bytes.
MAX_ELEMENTS = 1 << 60


def require_indexable(nodes, outputs, bindings: Mapping[str, int]) -> None:
    """Refuse a graph with a tensor, or a view some node reads, of more than MAX_ELEMENTS elements
    or reaching a position beyond it at `bindings`: such a shape overflows index arithmetic and the
    cost model's int64 counts (a NumPy casting error deep in pricing), so it is refused first, like
    any allocation that cannot be made."""
    key = tuple(sorted(bindings.items()))
    for node in nodes:
        _refuse_if(_shape_problem(tuple(node.shape), key), node, node.label, key)
        for edge in node.srcs:
            _refuse_if(
                _views_problem(edge.views, key), edge.node, f"{node.label} reading {edge.node.label}", key
            )
    for k, edge in enumerate(outputs):
        _refuse_if(_views_problem(edge.views, key), edge.node, f"output {k} ({edge.node.label})", key)


def _refuse_if(problem, node, what: str, key: tuple) -> None:
    if problem is None:
        return
    shape, count, reached = problem
    at = f" at {', '.join(f'{k}={v}' for k, v in key)}" if key else ""
    holds = (f"reads position {_about(count)}" if reached else
             f"has {_about(count)} elements, {_about(count * DTYPES[node.dtype].itemsize)} bytes")
    raise AllocationError(
        f"{what}: shape ({', '.join(map(str, shape))}){at} {holds}, more than the 2^60 elements "
        f"refcomp's 64-bit index arithmetic addresses"
    )


def _about(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"about {n:.3g}"


@functools.lru_cache(maxsize=65536)
def _shape_problem(shape: tuple, key: tuple):
    """(shape, elements, False) if the shape holds more than MAX_ELEMENTS at the binding, else None."""
    bindings = dict(key)
    count = 1
    for n in shape:
        count *= max(n if isinstance(n, int) else evaluate_dim(n, bindings), 0)
    return (shape, count, False) if count > MAX_ELEMENTS else None


@functools.lru_cache(maxsize=65536)
def _views_problem(views, key: tuple):
    """The first view of a stack holding more than MAX_ELEMENTS, or reading a position beyond it."""
    bindings = dict(key)
    for view in views.views:
        problem = _shape_problem(tuple(view.shape), key)
        if problem is not None:
            return problem
        reach = abs(evaluate_dim(view.offset, bindings))
        for n, stride in zip(view.shape, view.strides):
            reach += abs(evaluate_dim(stride, bindings)) * max(evaluate_dim(n, bindings) - 1, 0)
        if reach > MAX_ELEMENTS:
            return tuple(view.shape), reach, True
    return None
