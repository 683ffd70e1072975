"""The contract between code generation and the executors, defined by the stage that produces it.

Lowering produces CUDA source plus one `KernelSignature` per `__global__` function. Every backend
(host emulator, PyCUDA) loads that pair into a `Module` and launches kernels by name with a grid, a
block and a list of arguments. Buffers are backend-owned: the program runner asks the backend to
allocate, upload, download and poison them, so the same runner drives the CPU emulator and a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

# The only parameter types a generated kernel may take (unsigned short: float16 and bfloat16 storage).
PARAM_CTYPES = (
    "const float*",
    "float*",
    "const int*",
    "int*",
    "const long long*",
    "long long*",
    "const double*",
    "double*",
    "const unsigned short*",
    "unsigned short*",
    "unsigned int*",  # a split online kernel's tickets (atomics only: not a tensor's storage)
    "long long",
)
# What backends fill a kernel's output buffers with before it runs, a word at a time, so a missed
# write shows: a NaN as a float32, and each of its two halves a NaN as a float16 and as a bfloat16.
POISON_WORD = 0x7FFF7FFF


@dataclass(frozen=True)
class Param:
    ident: str  # C identifier chosen by refcomp (never a user-supplied name)
    ctype: str  # one of PARAM_CTYPES

    def __post_init__(self):
        assert self.ctype in PARAM_CTYPES, self.ctype
        assert self.ident.isidentifier(), self.ident


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[Param, ...]
    uses_barrier: (
        bool  # True when the kernel calls __syncthreads() (the emulator runs it as regions, or fibers)
    )


Dim3 = tuple[int, int, int]


class Module(Protocol):
    def launch(self, name: str, grid: Dim3, block: Dim3, args: Sequence[Any]) -> None:
        """Run kernel `name`; args are backend buffers (for pointer params) or Python ints (long long)."""


@runtime_checkable
class Backend(Protocol):
    name: str

    def load(self, source: str, kernels: Sequence[KernelSignature]) -> Module: ...
    def upload(self, array: np.ndarray) -> Any: ...
    def alloc(self, nbytes: int) -> Any: ...
    def fill_nan(self, buffer: Any, nbytes: int) -> None: ...
    def download(self, buffer: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
    def synchronize(self) -> None: ...
    def memory_bytes(self) -> int: ...  # what one run's buffers may use in all
