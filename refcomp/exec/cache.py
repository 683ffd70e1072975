"""Content-addressed on-disk cache for compiled artifacts (emulator .so files, nvcc reports).

Compiling CUDA source with g++ or nvcc takes hundreds of milliseconds; a test suite compiles the
same programs on every run. Artifacts are therefore stored under a key that hashes everything that
determines them (source, flags, compiler version), so a stale hit is impossible and no invalidation
is needed. Writes go to a temporary file in the same directory followed by `os.replace`, so
concurrent processes (pytest-xdist workers) never see a half-written file.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Union

Part = Union[str, bytes]


def cache_dir(kind: str = "", root: str | os.PathLike | None = None) -> Path:
    """`root` if given, else `$REFCOMP_CACHE_DIR`, else `$XDG_CACHE_HOME/refcomp`, else
    `~/.cache/refcomp`; the `kind` subfolder is created on demand.

    Read from the environment on every call so tests can redirect it with monkeypatch.
    """
    root = root or os.environ.get("REFCOMP_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "refcomp") if xdg else os.path.join(Path.home(), ".cache", "refcomp")
    path = Path(root) / kind if kind else Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_key(*parts: Part) -> str:
    """sha256 over length-prefixed parts, so ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def build_atomically(target: Path, build: Callable[[Path], None]) -> Path:
    """Produce `target` by calling `build(tmp)` on a temporary path next to it, then renaming.

    If `build` raises, the temporary file is removed and `target` is left untouched.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        build(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def write_atomically(target: Path, data: Part) -> Path:
    """Write text or bytes to `target` atomically."""
    payload = data.encode() if isinstance(data, str) else data
    return build_atomically(target, lambda tmp: tmp.write_bytes(payload))


@functools.lru_cache(maxsize=None)
def tool_version(tool: str) -> str:
    """`tool --version` output (part of every cache key: a compiler upgrade must miss the cache)."""
    try:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return proc.stdout + proc.stderr
