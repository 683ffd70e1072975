"""Choosing an executor by name: "emulator" (g++ on the host), "pycuda" (a real GPU).

The default is PyCUDA when it is installed and a device answers, else the host emulator, so the
same call works on a laptop, in CI and on a GPU machine.
"""
from __future__ import annotations

import functools
from typing import Optional

from ..errors import RefcompError

BACKENDS = ("emulator", "pycuda", "numpy")


@functools.lru_cache(maxsize=None)
def _instance(name: str):
    if name == "emulator":
        from .emulator import EmulatorBackend
        return EmulatorBackend()
    from .pycuda_backend import PyCudaBackend, pycuda_unavailable_reason
    reason = pycuda_unavailable_reason()
    if reason:
        raise RefcompError(f"backend 'pycuda' is not usable here: {reason}")
    return PyCudaBackend()


def default_backend() -> str:
    from .pycuda_backend import pycuda_unavailable_reason
    return "pycuda" if pycuda_unavailable_reason() is None else "emulator"


def get_backend(name: Optional[str] = None):
    name = default_backend() if name is None else name
    if name not in ("emulator", "pycuda"):
        raise RefcompError(f"unknown backend {name!r}: choose one of {BACKENDS}")
    return _instance(name)
