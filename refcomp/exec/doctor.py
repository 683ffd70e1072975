"""`refcomp doctor`: which executors work on this machine, and how to get the ones that don't.

refcomp runs programs three ways (NumPy reference, host emulator, GPU through PyCUDA) and can check
generated source with nvcc. Each needs different tools; this report saves a user from finding out
which is missing through a skipped test or a failed build.
"""
from __future__ import annotations

import shutil
import subprocess

from refcomp.errors import CacheError
from refcomp.exec import cache


def _emulator_status() -> str | None:
    gxx = shutil.which("g++")
    if gxx is None:
        return "g++ not found on PATH (Debian/Ubuntu: apt-get install g++)"
    if "g++" not in cache.tool_version(gxx) and "GCC" not in cache.tool_version(gxx):
        return f"g++ at {gxx} does not run"
    return None


def _sanitizer_status() -> str | None:
    gxx = shutil.which("g++")
    if gxx is None:
        return "g++ not found on PATH"
    try:
        out = subprocess.run([gxx, "-print-file-name=libasan.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot query g++: {exc}"
    if "/" not in out:  # g++ echoes the bare name back when it has no such library
        return "libasan not found (Debian/Ubuntu: apt-get install libasan8, or the libasan matching your g++)"
    return None


def _line(name: str, reason: str | None, what: str) -> str:
    return f"  {name:<18} {'ok' if reason is None else 'UNAVAILABLE'}  {what}" + \
        ("" if reason is None else f"\n  {'':<18} -> {reason}")


def doctor() -> str:
    """A human-readable report, one entry per executor; never raises."""
    from refcomp.exec.nvcc import nvcc_available
    from refcomp.exec.pycuda_backend import pycuda_unavailable_reason

    checks = [
        ("numpy reference", None, "runs every program with NumPy (always available)"),
        ("emulator", _emulator_status(), "compiles generated CUDA with g++ and runs it on the CPU"),
        ("emulator sanitize", _sanitizer_status(),
         "REFCOMP_EMU_SANITIZE=1: AddressSanitizer catches out-of-bounds kernel accesses"),
        ("nvcc check", nvcc_available(), "compiles generated CUDA with nvcc; any warning fails"),
        ("pycuda", pycuda_unavailable_reason(), "runs generated CUDA on a GPU"),
    ]
    lines = ["refcomp doctor: executors on this machine"]
    lines += [_line(name, reason, what) for name, reason, what in checks]
    try:
        lines.append(f"  cache directory    {cache.cache_dir()}")
    except CacheError as exc:  # doctor reports what is wrong instead of failing
        lines.append(f"  cache directory    unusable: {exc}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(doctor())
