"""Host emulator backend: compiles the generated CUDA source with g++ and runs kernels on the CPU.

The same source that nvcc and PyCUDA compile is compiled here with `g++ -include emu_shim.h`, so
the emulator tests the code refcomp actually emits, not a model of it (a kernel repeated under
another name, as a deep model's layers repeat theirs, is compiled once: emulator_source). One
small C++ function per KernelSignature is appended to the source; it unpacks a `void**` argument
array by the parameter ctypes and calls the kernel. The grid runner's one entry (emu_runtime.cpp)
runs it over the grid in the kernel's mode (emu_regions.py: plain threads, barrier-free regions, or
fibers; see emu_shim.h for the model). Blocks run in parallel on `REFCOMP_EMU_THREADS` worker
threads (default: the usable cores). A library is first built quick to compile, and rebuilt
optimised once its program keeps running (`OPTIMIZE_ENV`).

Sanitizer mode (`REFCOMP_EMU_SANITIZE=1` or `EmulatorBackend(sanitize=True)`) builds the library
with AddressSanitizer and runs each launch in a child process (emu_asan.py). Building is emu_build.py.
"""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from refcomp.errors import RefcompError
from refcomp.exec import cache
from ..codegen.abi import POISON_WORD, Dim3, KernelSignature
from refcomp.reference.limits import host_memory_bytes
from .emu_asan import launch_sanitized
from .emu_build import (FAST_FLAGS, SANITIZE_FLAGS, SHIM_PATH, compile_library, fast_flags, gxx_invocations,
                        gxx_path, library_cached, load_library, memory_cache, optimized, shim_bytes)
from .emu_regions import MODE_CODES, kernel_modes, repeated_kernels

SANITIZE_ENV = "REFCOMP_EMU_SANITIZE"
THREADS_ENV = "REFCOMP_EMU_THREADS"  # read by the shim at each launch
# A program's library is built at -O1 (quick to build: most programs run once or twice); once a
# module has run OPTIMIZE_AFTER_RUNS times it is rebuilt with emu_build.OPTIMIZED_FLAGS in a background
# thread and swapped in when ready, and later loads find that build in the cache and use it at once.
# Both builds give the same bits (tests/test_emu_simd.py). "0": never; "now": build it at load.
OPTIMIZE_ENV = "REFCOMP_EMU_OPTIMIZE"
OPTIMIZE_AFTER_RUNS = 3
_upgrades: list[threading.Thread] = []  # background builds, for wait_for_optimized_builds
_building: set[str] = set()  # keys of optimised builds started by this process (each built once)
_launch_lock = threading.Lock()  # one launch at a time: the error message is per library
# Building lives in emu_build (compile_library takes extra flags and -include headers, for an
# instrumented build of the same source); the old private names stay for callers of this module.
_compile_library, _load_library, _memory_cache = compile_library, load_library, memory_cache
__all__ = ["EmulatorBackend", "EmulatorModule", "check_launch_shape", "gxx_invocations", "gxx_path",
           "FAST_FLAGS", "SANITIZE_FLAGS", "SHIM_PATH"]


def wait_for_optimized_builds(timeout: float | None = None) -> bool:
    """Wait for the background builds started so far (benchmarks call it before timing); True if
    none is still running."""
    for thread in list(_upgrades):
        thread.join(timeout)
    return not any(t.is_alive() for t in _upgrades)


def _ready(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.refcomp_emu_launch.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.refcomp_emu_launch.restype = ctypes.c_int
    lib.refcomp_emu_error.restype = ctypes.c_char_p
    return lib


def clear_memory_cache() -> None:
    """Forget libraries loaded by this process, so the next load goes to the disk cache."""
    memory_cache.clear()
    _building.clear()


def _caller(sig: KernelSignature, runs: str | None = None) -> str:
    """C++ function `refcomp_call_<name>(void** args)` for one kernel: unpacks the argument array by
    the parameters' ctypes and calls the kernel (or `runs`, the kernel whose definition it shares).
    `refcomp_emu_launch` (emu_runtime.cpp) runs it over a grid."""
    args = ", ".join(
        f"*(const long long*)args[{i}]" if p.ctype == "long long" else f"({p.ctype})args[{i}]"
        for i, p in enumerate(sig.params))
    return (f"EMU_EXPORT void refcomp_call_{sig.name}(void* p) {{ void** args = (void**)p; (void)args; "
            f"{runs or sig.name}({args}); }}\n")


def callers(kernels: Sequence[KernelSignature], runs: dict[str, str] | None = None) -> str:
    """The entry points appended to a translation unit for the emulator (one `_caller` a kernel)."""
    runs = runs or {}
    return "\n// ---- emulator entry points ----\n" + "".join(_caller(k, runs.get(k.name)) for k in kernels)


def emulator_source(source: str, kernels: Sequence[KernelSignature]) -> str:
    """What g++ compiles for the emulator: `source`, each repeated kernel defined once
    (emu_regions.repeated_kernels), and the entry points."""
    compiled, runs = repeated_kernels(source, kernels)
    return compiled.rstrip() + "\n" + callers(kernels, runs)


def mode_code(sig: KernelSignature, mode: str | None = None) -> int:
    """The shim's code for running `sig` in `mode` (emu_regions; by default fibers if the signature
    says it has barriers, else threads)."""
    return MODE_CODES[mode] if mode else 2 * int(sig.uses_barrier)


def _dim3(value: Any, what: str) -> Dim3:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) for d in dims):
        raise RefcompError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if min(dims) < 1:
        raise RefcompError(f"{what} dimensions must be >= 1, got {dims}")
    return dims  # type: ignore[return-value]


def check_launch_shape(grid: Any, block: Any) -> tuple[Dim3, Dim3]:
    """Normalise grid and block to 3-tuples and enforce CUDA's limits, so the emulator rejects
    launches a GPU would reject."""
    g, b = _dim3(grid, "grid"), _dim3(block, "block")
    if b[0] * b[1] * b[2] > 1024 or b[0] > 1024 or b[1] > 1024 or b[2] > 64:
        raise RefcompError(f"block {b} exceeds CUDA's limits (1024 threads, z <= 64)")
    if g[0] > 2**31 - 1 or g[1] > 65535 or g[2] > 65535:
        raise RefcompError(f"grid {g} exceeds CUDA's limits (x < 2^31, y and z <= 65535)")
    return g, b


@dataclass
class _Bound:
    """A launch's arguments after validation: buffers deduplicated, ints range-checked."""
    buffers: list[np.ndarray]
    written: list[bool]       # buffer is bound to some non-const pointer
    slots: list[tuple[str, int]]  # ("b", buffer index) or ("i", value) per parameter


def bind_args(sig: KernelSignature, args: Sequence[Any]) -> _Bound:
    if len(args) != len(sig.params):
        raise RefcompError(f"kernel {sig.name} takes {len(sig.params)} arguments, got {len(args)}")
    bound = _Bound([], [], [])
    for param, arg in zip(sig.params, args):
        if param.ctype == "long long":
            if isinstance(arg, bool) or not isinstance(arg, (int, np.integer)):
                raise RefcompError(f"kernel {sig.name}: {param.ident} is long long, got {type(arg).__name__}")
            if not -2**63 <= int(arg) < 2**63:
                raise RefcompError(f"kernel {sig.name}: {param.ident}={arg} does not fit in long long")
            bound.slots.append(("i", int(arg)))
            continue
        if not isinstance(arg, np.ndarray) or not arg.flags.c_contiguous:
            raise RefcompError(f"kernel {sig.name}: {param.ident} ({param.ctype}) needs a buffer from "
                               f"this backend, got {type(arg).__name__}")
        writes = not param.ctype.startswith("const")
        if writes and not arg.flags.writeable:
            raise RefcompError(f"kernel {sig.name}: {param.ident} is written but its buffer is read-only")
        for index, known in enumerate(bound.buffers):  # one buffer passed twice stays one buffer
            if known.ctypes.data == arg.ctypes.data and known.nbytes == arg.nbytes:
                break
        else:
            index = len(bound.buffers)
            bound.buffers.append(arg)
            bound.written.append(False)
        bound.written[index] |= writes
        bound.slots.append(("b", index))
    return bound


class EmulatorModule:
    """A loaded translation unit; `launch` runs a kernel over the grid on the CPU. `upgrade` is the
    (source, flags, key) of the optimised build to switch to after a few runs, or None."""

    def __init__(self, library: ctypes.CDLL | Path, kernels: Sequence[KernelSignature], sanitize: bool,
                 cache_root: str | None = None, modes: dict[str, str] | None = None,
                 upgrade: tuple[str, tuple[str, ...], str] | None = None):
        self.kernels = {k.name: k for k in kernels}
        self.modes = modes or {}  # kernel name -> "threads", "regions" or "fibers" (emu_regions)
        self.sanitize = sanitize
        self._cache_root = cache_root
        self._library = _ready(library) if isinstance(library, ctypes.CDLL) else library
        self._upgrade = upgrade
        self._launches = 0

    def launch(self, name: str, grid: Dim3, block: Dim3, args: Sequence[Any]) -> None:
        sig = self.kernels.get(name)
        if sig is None:
            raise RefcompError(f"no kernel named {name!r} in this module (have {sorted(self.kernels)})")
        g, b = check_launch_shape(grid, block)
        bound = bind_args(sig, args)
        if self.sanitize:
            launch_sanitized(self._library, sig, mode_code(sig, self.modes.get(name)), g, b, bound,
                             self._cache_root)
            return
        keep = [ctypes.c_longlong(v) for kind, v in bound.slots if kind == "i"]
        ints = iter(keep)
        argv = (ctypes.c_void_p * max(1, len(bound.slots)))()
        for i, (kind, v) in enumerate(bound.slots):
            argv[i] = bound.buffers[v].ctypes.data if kind == "b" else ctypes.addressof(next(ints))
        with _launch_lock:
            library = self._library  # the optimised build may replace it between two launches
            assert isinstance(library, ctypes.CDLL)
            call = ctypes.cast(getattr(library, f"refcomp_call_{name}"), ctypes.c_void_p)
            rc = library.refcomp_emu_launch(*g, *b, mode_code(sig, self.modes.get(name)), call, argv)
            message = library.refcomp_emu_error().decode() if rc else ""
        if rc:
            raise RefcompError(f"kernel {name} (grid {g}, block {b}) failed in the emulator: {message}")
        self._launches += 1
        if self._upgrade is not None and self._launches >= OPTIMIZE_AFTER_RUNS * len(self.kernels):
            self._upgrade_when_built()

    def _upgrade_when_built(self) -> None:
        """Switch to the optimised library if it has been built (by this module's request or another
        module's with the same source), else have it built once, in the background."""
        full, flags, key = self._upgrade
        built = memory_cache.get(key)
        if isinstance(built, ctypes.CDLL):
            with _launch_lock:
                self._library = built
            self._upgrade = None
            return
        if key in _building:
            return
        root = self._cache_root

        def build() -> None:
            try:
                memory_cache[key] = _ready(load_library(full, flags, key, root, background=True))
            except Exception:  # noqa: BLE001 - a failed build (a full disk, a removed cache) keeps the -O1 one
                pass

        _building.add(key)
        _upgrades[:] = [t for t in _upgrades if t.is_alive()]
        thread = threading.Thread(target=build, name="refcomp-emu-optimize", daemon=True)
        _upgrades.append(thread)
        thread.start()


class EmulatorBackend:
    """abi.Backend that runs kernels on the host. Buffers are flat uint8 numpy arrays."""

    name = "emulator"

    def __init__(self, sanitize: bool | None = None, cache_dir: str | os.PathLike | None = None):
        if sanitize is None:
            sanitize = os.environ.get(SANITIZE_ENV, "") not in ("", "0")
        self.sanitize = bool(sanitize)
        self._cache_dir = None if cache_dir is None else str(cache_dir)

    def load(self, source: str, kernels: Sequence[KernelSignature]) -> EmulatorModule:
        names = [k.name for k in kernels]
        if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise RefcompError(f"kernel names must be distinct C identifiers, got {names}")
        modes = kernel_modes(source, kernels)
        full = emulator_source(source, kernels)
        gxx = gxx_path()
        flags = SANITIZE_FLAGS if self.sanitize else fast_flags(gxx, FAST_FLAGS)
        key = cache.cache_key("emu-v2", shim_bytes(), full, *flags, cache.tool_version(gxx))
        upgrade = None
        when = os.environ.get(OPTIMIZE_ENV, "")
        if not self.sanitize and when != "0" and "-O1" in flags:
            better = optimized(flags)
            better_key = cache.cache_key("emu-v2", shim_bytes(), full, *better, cache.tool_version(gxx))
            if when == "now" or better_key in memory_cache or library_cached(better_key, self._cache_dir):
                flags, key = better, better_key
            else:
                upgrade = (full, better, better_key)
        known = memory_cache.get(key)
        if known is None or (isinstance(known, Path) and not known.exists()):
            if self.sanitize:  # loaded by the runner process, never by Python
                memory_cache[key] = compile_library(full, flags, key, self._cache_dir)
            else:
                memory_cache[key] = _ready(load_library(full, flags, key, self._cache_dir))
        return EmulatorModule(memory_cache[key], kernels, self.sanitize, self._cache_dir, modes, upgrade)

    def upload(self, array: np.ndarray) -> np.ndarray:
        src = np.ascontiguousarray(array)
        return src.reshape(-1).view(np.uint8).copy()

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.zeros(int(nbytes), dtype=np.uint8)

    def fill_nan(self, buffer: np.ndarray, nbytes: int) -> None:
        n = min(int(nbytes), buffer.nbytes) // 4
        buffer.reshape(-1).view(np.uint8)[: n * 4].view(np.uint32)[:] = POISON_WORD

    def download(self, buffer: np.ndarray, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        need = count * dtype.itemsize
        raw = buffer.reshape(-1).view(np.uint8)
        if need > raw.nbytes:
            raise RefcompError(f"download of {shape} {dtype} needs {need} bytes, buffer has {raw.nbytes}")
        return raw[:need].view(dtype).reshape(shape).copy()

    def synchronize(self) -> None:
        pass

    def memory_bytes(self) -> int:
        return host_memory_bytes()
