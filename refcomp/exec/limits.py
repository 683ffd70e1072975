"""How much memory an executor has, and the error for a run that would not fit.

NumPy raises MemoryError for an impossible array, or, under Linux's overcommit, hands out memory
that the machine then swaps or kills the process for while it is filled. Both are worse than a
refusal that says how many bytes the run needs and which tensor needs them, so the reference and
the program runner check their sizes against this before they allocate.
"""
from __future__ import annotations

import functools
import os

from ..errors import AllocationError


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
        raise AllocationError(f"{what} needs {show_bytes(nbytes)}, more than {where} has ({show_bytes(capacity)})")
