"""Building emulator libraries: g++ on generated CUDA source with `-include emu_shim.h`.

`compile_library` is the one place a library is built (the emulator, its sanitizer runner and any
instrumented build call it with their own flags and extra headers); the disk cache (`exec/cache.py`)
keeps what it builds, trusted only through its stamp.

Parsing the shim and the C++ headers it pulls in is most of g++'s time on a small program, and a
first run builds hundreds of small libraries. So the shim is precompiled once per flag set
(`precompiled_shim`: a .gch in the cache, stamped like a library) and `-include`d from there; the
library's bytes are the same (figures: docs/ARCHITECTURE.md, section 7). Where it cannot be
precompiled, the shim's text is parsed.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from refcomp.errors import RefcompError
from refcomp.exec import cache
from refcomp.progress import stage

SHIM_PATH = Path(__file__).with_name("emu_shim.h")
SHIM_HEADERS = (SHIM_PATH,)  # what a library's source is compiled with (`-include`)
# The grid runner and what it #includes, compiled once per flag set and linked into each library
RUNTIME_PATH = SHIM_PATH.with_name("emu_runtime.cpp")
RUNTIME_SOURCES = (RUNTIME_PATH, SHIM_PATH.with_name("emu_fibers.h"))
# IEEE semantics as nvcc without --use_fast_math gives them: no contraction into fma, errno-free
# math (no behaviour change), no fast-math; the optimiser only reorders what IEEE allows. -O1, not
# -O3: a first run compiles hundreds of libraries, and -O1 about halves g++'s time per library for
# a modest cost in the warm runs (bench/results/emulator.json). -fopenmp-simd lets the shim's
# region loops run a block's threads in vector lanes (emu_shim.h says why that changes no result);
# it needs no OpenMP runtime. The machine's own instruction set is added by `fast_flags`.
FAST_FLAGS = ("-O1", "-fopenmp-simd", "-std=c++17", "-pthread", "-fno-strict-aliasing", "-fwrapv",
              "-fno-math-errno", "-ffp-contract=off", "-fvisibility=hidden")
# The optimised build that replaces a program's library once it has run a few times (emulator.py):
# -O3 with the region loops' inner loops of up to 33 iterations (a 32-wide tile) unrolled completely,
# so that the loop over the threads becomes the innermost one, and -fno-trapping-math, so that a
# thread's conditional arithmetic may be computed in every lane and selected. A GPU raises no
# floating-point exceptions and nothing here reads their flags; every value is the same.
OPTIMIZED_FLAGS = ("-O3", "-fno-trapping-math", "--param=max-completely-peel-times=33",
                   "--param=max-completely-peeled-insns=600")
SANITIZE_FLAGS = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1", "-std=c++17", "-pthread",
                  "-fno-strict-aliasing", "-fwrapv", "-ffp-contract=off", "-fvisibility=hidden")
SOURCE_NAME = "generated.cu"
PCH_ENV = "REFCOMP_EMU_PCH"  # "0": never precompile the shim (to measure or rule it out)
NATIVE_ENV = "REFCOMP_EMU_NATIVE"  # "0": build for the baseline of the architecture (to compare)

memory_cache: dict[str, ctypes.CDLL | Path] = {}  # key -> library; runner or shim copy path -> verified file
_builds_without_pch: dict[str, int] = {}  # precompiled-header folder -> libraries built without it here
_gxx_runs = 0
_pch_runs = 0
_optimized_runs = 0


def gxx_invocations() -> int:
    """How many libraries this process has built with g++ (tests use it to prove a cache hit); the
    shim's precompiled header is counted apart (`pch_builds`)."""
    return _gxx_runs


def optimized_builds() -> int:
    """How many optimised libraries this process has built in the background (not in gxx_invocations,
    so that a test proving a cache hit is not disturbed by an upgrade running beside it)."""
    return _optimized_runs


def optimized(flags: Sequence[str]) -> tuple[str, ...]:
    """`flags` with -O1 replaced by OPTIMIZED_FLAGS."""
    return tuple(g for f in flags for g in (OPTIMIZED_FLAGS if f == "-O1" else (f,)))


def pch_builds() -> int:
    """How many times this process has precompiled the shim (once per flag set and cache, at most)."""
    return _pch_runs


def shim_bytes() -> bytes:
    """The shim's header and runtime, for cache keys: a library depends on every byte of them."""
    return b"".join(path.read_bytes() for path in SHIM_HEADERS + RUNTIME_SOURCES)


def gxx_path() -> str:
    path = shutil.which(os.environ.get("REFCOMP_CXX", "g++"))
    if path is None:
        raise RefcompError("g++ not found on PATH: the emulator needs it (apt-get install g++)")
    return path


def fast_flags(gxx: str, base: Sequence[str] = FAST_FLAGS) -> tuple[str, ...]:
    """`base` plus this machine's instruction set, spelt out (`native_flags`)."""
    return tuple(base) + (() if os.environ.get(NATIVE_ENV, "") == "0" else native_flags(gxx))


@functools.lru_cache(maxsize=None)
def native_flags(gxx: str) -> tuple[str, ...]:
    """The -m options that `-march=native` stands for on this CPU (as g++ -v reports them), or ()
    where the compiler does not say (clang, another architecture).

    Wider vectors let the region loops run more threads per instruction. They are passed spelt out,
    not as `-march=native`, because the flags are part of every cache key (libraries and the
    precompiled shim): a cache shared by two machines must not hand one a library built for the
    other's instructions. Results do not depend on them: contraction into fma stays off, and IEEE
    arithmetic is the same in any vector width."""
    try:
        proc = subprocess.run([gxx, "-march=native", "-E", "-v", "-x", "c++", os.devnull, "-o", os.devnull],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    for line in proc.stderr.splitlines():
        words = line.split()
        if proc.returncode == 0 and words and words[0].endswith("cc1plus"):
            spelt = tuple(w for w in words if w.startswith("-m") and w != "-march=native")
            return spelt if any(w.startswith("-march=") for w in spelt) else ()
    return ()


def _source_excerpt(text: str, line: int, radius: int = 3) -> str:
    lines = text.splitlines()
    lo, hi = max(1, line - radius), min(len(lines), line + radius)
    return "\n".join(f"{'>' if n == line else ' '}{n:5d} | {lines[n - 1]}" for n in range(lo, hi + 1))


def run_gxx(args: list[str], text: str, what: str, library: bool = True, background: bool = False,
            counted: bool = True) -> None:
    """Run g++; on failure raise RefcompError with its message and the source around the error.
    Unless not `counted` (the grid runner's object), counted as an optimised build (`background`),
    a library, or else a precompiled header."""
    global _gxx_runs, _pch_runs, _optimized_runs
    if counted and background:
        _optimized_runs += 1
    elif counted and library:
        _gxx_runs += 1
    elif counted:
        _pch_runs += 1
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode == 0:
        return
    msg = proc.stderr.strip()
    if len(msg) > 4000:
        msg = msg[:4000] + "\n[... compiler output truncated ...]"
    found = re.search(rf"{re.escape(SOURCE_NAME)}:(\d+):(?:\d+:)? (?:fatal )?error", proc.stderr)
    excerpt = f"\nsource around line {found.group(1)}:\n{_source_excerpt(text, int(found.group(1)))}" \
        if found else ""
    raise RefcompError(f"g++ failed to compile {what}:\n{msg}{excerpt}")


def precompiled_shim(gxx: str, flags: Sequence[str], root: str | None) -> Path | None:
    """A copy of the shim's headers in the cache with the shim precompiled for `flags` beside it
    (g++ reads `<dir>/emu_shim.h.gch` for `-include <dir>/emu_shim.h` when the flags match, and the
    header's text when not); the copy's path, or None to parse the shim's own text. Precompiling
    costs about two small libraries' parse, so a cache gets its .gch at the second library this
    process builds there, not for a one-off build. The copies and the .gch are code, so they are
    checked like a library (the headers against the package's bytes, the .gch through its stamp),
    once per process."""
    if os.environ.get(PCH_ENV, "") == "0":
        return None
    key = cache.cache_key("emu-pch-v1", shim_bytes(), *flags, cache.tool_version(gxx))
    try:
        folder = cache.cache_dir(root=root) / "pch" / key[:32]
        header = folder / SHIM_PATH.name
        gch = header.with_name(header.name + ".gch")
        if memory_cache.get(str(header)) == header and gch.is_file():
            return header
        _builds_without_pch[str(folder)] = wanted = _builds_without_pch.get(str(folder), 0) + 1
        if wanted < 2 and not gch.is_file():
            return None
        cache.cache_dir(f"pch/{key[:32]}", root)
        for path in SHIM_HEADERS:
            copy = folder / path.name
            if not copy.is_file() or copy.read_bytes() != path.read_bytes():
                cache.write_atomically(copy, path.read_bytes())

        def build(tmp: Path) -> None:
            run_gxx([gxx, *flags, "-fPIC", "-x", "c++-header", str(header), "-o", str(tmp)],
                    "", "the emulator shim's precompiled header", library=False)

        cache.cached_build(gch, build, {"key": key, "compiler": cache.tool_version(gxx)})
    except (OSError, RefcompError):  # a full disk, a compiler without precompiled headers: parse the text
        return None
    memory_cache[str(header)] = header
    return header


def runtime_object(gxx: str, flags: Sequence[str], root: str | None) -> Path:
    """The grid runner (emu_runtime.cpp) compiled with `flags` into an object file in the cache, once
    per flag set: every library links it instead of compiling it again (about 0.1 s of g++ each).
    Like a library, the object is code, so it is checked through its stamp (once per process)."""
    key = cache.cache_key("emu-runtime-v1", shim_bytes(), *flags, cache.tool_version(gxx))
    target = cache.cache_dir("emu", root) / f"runtime-{key}.o"
    if memory_cache.get(str(target)) == target and target.is_file():
        return target

    def build(tmp: Path) -> None:
        run_gxx([gxx, *flags, "-fPIC", "-c", "-x", "c++", str(RUNTIME_PATH), "-o", str(tmp)],
                RUNTIME_PATH.read_text(), "the emulator's grid runner", counted=False)

    meta = {"key": key, "compiler": cache.tool_version(gxx)}
    memory_cache[str(target)] = cache.cached_build(target, build, meta)
    return target


def library_path(key: str, root: str | None) -> Path:
    return cache.cache_dir("emu", root) / f"{key}.so"


def library_cached(key: str, root: str | None) -> bool:
    """Whether the disk cache holds a library under `key` that its stamp vouches for."""
    gxx = gxx_path()
    return cache.vouched(library_path(key, root), {"key": key, "compiler": cache.tool_version(gxx)})


def compile_library(full_text: str, flags: Sequence[str], key: str, root: str | None,
                    force: bool = False, includes: Sequence[Path] = (SHIM_PATH,),
                    background: bool = False) -> Path:
    """Compile `full_text` to a shared library in the disk cache (or find a stamped one there).
    `includes` are passed with `-include`, in order (the shim, first, from its precompiled copy);
    `key` must cover everything that shapes the build (the source, the flags and the headers' bytes).
    A `background` build reports no progress and counts apart (optimized_builds)."""
    gxx = gxx_path()
    target = library_path(key, root)

    def build(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="refcomp-emu-") as work, stage("g++ build", not background):
            src = Path(work) / SOURCE_NAME
            src.write_text(full_text)
            shimmed = bool(includes) and includes[0] == SHIM_PATH
            shim = precompiled_shim(gxx, flags, root) if shimmed else None
            pre = [
                arg
                for path in ([shim, *includes[1:]] if shim else includes)
                for arg in ("-include", str(path))
            ]
            runtime = ["-x", "none", str(runtime_object(gxx, flags, root))] if shimmed else []
            run_gxx([gxx, *flags, "-shared", "-fPIC", *pre, "-x", "c++", str(src), *runtime, "-o", str(tmp)],
                    full_text, "the generated CUDA source for the emulator", background=background)

    return cache.cached_build(target, build, {"key": key, "compiler": cache.tool_version(gxx)}, force)


def load_library(full_text: str, flags: Sequence[str], key: str, root: str | None,
                 includes: Sequence[Path] = (SHIM_PATH,), background: bool = False) -> ctypes.CDLL:
    """dlopen the cached library; one that passes its stamp but still fails to load (a stamp
    forged or copied along with a bad file) is rebuilt once, then reported."""
    for force in (False, True):
        path = compile_library(full_text, flags, key, root, force, includes, background)
        try:
            return ctypes.CDLL(str(path))
        except OSError as exc:
            error = exc
    raise cache.broken_after_rebuild("load the emulator library", path, error)
