"""Content-addressed on-disk cache for compiled artifacts (emulator .so files, nvcc reports).

Compiling CUDA source with g++ or nvcc takes hundreds of milliseconds; a test suite compiles the
same programs on every run. Artifacts are therefore stored under a key that hashes everything that
determines them (source, flags, compiler version), so a stale hit is impossible and no invalidation
is needed. Writes go to a temporary file in the same directory followed by `os.replace`, so
concurrent processes (pytest-xdist workers) never see a half-written file.

A file can still go bad after it is written (a full disk, a crash mid-copy, a user's stray edit),
and `dlopen` on a damaged library can crash the process. So binaries are only trusted through a
stamp: a sidecar `<name>.stamp` holding the sha256 of the bytes and who built them, written after
the artifact and checked before every load from disk. No valid stamp means rebuild.

Whoever can write into the cache folder could plant a library, a template's bytecode or a program
file of their own, so every stamp is a MAC (HMAC-SHA256) under a key only this user can read
(`key`, mode 0600, made on first use): a planted file fails its MAC and is rebuilt, never loaded.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
import stat
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Union

import jinja2

from refcomp.errors import CacheError

Part = Union[str, bytes]
ENV = "REFCOMP_CACHE_DIR"


def _unusable(path: Path, why: object) -> CacheError:
    return CacheError(f"refcomp cannot use {path} for its kernel cache ({why}); set {ENV} to a "
                      f"writable directory, e.g. {ENV}=/tmp/refcomp-cache")


def broken_after_rebuild(what: str, path: Path, exc: OSError) -> CacheError:
    return CacheError(f"cannot {what} {path} even after rebuilding it: {exc}; delete it, or set {ENV} "
                      f"to another directory")


def cache_dir(kind: str = "", root: str | os.PathLike | None = None) -> Path:
    """`root` if given, else `$REFCOMP_CACHE_DIR`, else `$XDG_CACHE_HOME/refcomp`, else
    `~/.cache/refcomp`; created if missing (a missing cache is normal, an unusable one an error).

    Read from the environment on every call so tests can redirect it with monkeypatch.
    """
    root = root or os.environ.get(ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "refcomp") if xdg else os.path.join(Path.home(), ".cache", "refcomp")
    path = Path(root) / kind if kind else Path(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next(p for p in (path, *path.parents) if p.exists())
        why = f"{blocker} is a file" if not blocker.is_dir() else f"cannot create it: {exc.strerror}"
        raise _unusable(path, why) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise _unusable(path, "not writable")
    return path


def cache_key(*parts: Part) -> str:
    """sha256 over length-prefixed parts, so ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


KEY_FILE = "key"


def _key_is_private(path: Path) -> bool:
    """A regular file of this user's, readable by no one else, holding 32 bytes."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077
            and info.st_size == 32)


@functools.lru_cache(maxsize=None)
def _key(root: Path) -> bytes:
    path = root / KEY_FILE
    if not _key_is_private(
        path
    ):  # missing, or readable (so forgeable) by others: a new key voids every old MAC
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".key.")  # mkstemp creates the file with mode 0600
        try:
            os.write(fd, secrets.token_bytes(32))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    return path.read_bytes()


def mac(data: Part) -> str:
    """HMAC-SHA256 of `data` under this user's cache key: who cannot read the key cannot forge it."""
    root = cache_dir()
    try:
        key = _key(root.resolve())
    except OSError as exc:
        raise _unusable(root, f"cannot keep its key: {exc.strerror or exc}") from exc
    return hmac.new(key, data.encode() if isinstance(data, str) else data, hashlib.sha256).hexdigest()


def build_atomically(target: Path, build: Callable[[Path], None]) -> Path:
    """Produce `target` by calling `build(tmp)` on a temporary path next to it, then renaming.

    If `build` raises, the temporary file is removed and `target` is left untouched. A directory
    squatting on `target` is removed first: `os.replace` cannot overwrite it.
    """
    directory = cache_dir(root=target.parent)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise _unusable(directory, exc.strerror) from exc
    try:
        build(Path(tmp))
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except OSError as exc:
        raise _unusable(directory, f"cannot write {target.name}: {exc.strerror or exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def write_atomically(target: Path, data: Part) -> Path:
    """Write text or bytes to `target` atomically."""
    payload = data.encode() if isinstance(data, str) else data
    return build_atomically(target, lambda tmp: tmp.write_bytes(payload))


def _stamp(target: Path) -> Path:
    return target.with_name(target.name + ".stamp")


def _vouched(target: Path, meta: dict[str, str]) -> bool:
    try:
        stamp = json.loads(_stamp(target).read_text())  # stamp first: it is written last
        return stamp == {"mac": mac(target.read_bytes()), **meta}
    except (OSError, ValueError, RecursionError):  # missing, a directory, garbage, not UTF-8, nested deep
        return False


def vouched(target: Path, meta: dict[str, str]) -> bool:
    """Whether `target`'s stamp vouches for its bytes and `meta` (what cached_build would reuse)."""
    return _vouched(target, meta)


def cached_build(target: Path, build: Callable[[Path], None], meta: dict[str, str],
                 force: bool = False) -> Path:
    """`target` if its stamp vouches for its bytes and for `meta` (key, compiler version), else a
    fresh `build` stamped afterwards; `force` rebuilds a file the loader rejected anyway.

    Processes racing to rebuild can leave a library and a stamp from different builds: that costs
    one more rebuild, never a bad load.
    """
    if force or not _vouched(target, meta):
        build_atomically(target, build)
        write_atomically(_stamp(target), json.dumps({"mac": mac(target.read_bytes()), **meta}))
    return target


@functools.lru_cache(maxsize=None)
def tool_version(tool: str) -> str:
    """`tool --version` output (part of every cache key: a compiler upgrade must miss the cache)."""
    try:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return proc.stdout + proc.stderr


class TemplateCache(jinja2.BytecodeCache):
    """Jinja's compiled templates, kept in the cache directory (kind "templates") for later processes.
    Jinja keys a template by its file and checks its source's checksum and the Python version; the
    file name adds Jinja's version, and the file starts with the bytecode's MAC (`mac`: bytecode is
    code), so a damaged or planted file is compiled again, never run. A cache directory that cannot
    be used costs only the compile."""

    def _path(self, bucket: jinja2.bccache.Bucket) -> Path:
        return cache_dir("templates") / f"{cache_key(bucket.key, jinja2.__version__)}.bc"

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            data = self._path(bucket).read_bytes()
            digest, code = data[:64], data[64:]
            if hmac.compare_digest(mac(code).encode(), digest):
                bucket.bytecode_from_string(code)
        except (OSError, CacheError):
            return

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = bucket.bytecode_to_string()
        try:
            write_atomically(self._path(bucket), mac(code).encode() + code)
        except (OSError, CacheError):
            pass
