"""Compile generated CUDA with the real nvcc, fail on any warning, and report per-kernel resources.

The emulator proves generated kernels compute the right values; it cannot prove nvcc accepts them
or that they fit on the GPU. `nvcc_check` compiles to a cubin for one architecture with every
warning made an error (nvcc's front end: `--Werror all-warnings`, which also hands `-Werror` to
ptxas) and parses ptxas' `-v` statistics: registers, static shared memory, stack frame and spills.
Double-precision use is allowed by default: CUDA's own `sinf` falls back to double arithmetic
for huge arguments, and refcomp evaluates symbolic constants such as 1/T in double before rounding
to float. `allow_double=False` adds ptxas' `-warn-double-usage` (then an error) to hunt stray
double literals. Spills are counted, and only fail the check when asked. Results are cached by content hash
like the emulator's libraries.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from refcomp.errors import RefcompError
from refcomp.exec import cache
from refcomp.progress import stage

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass
class KernelResources:
    registers: int = 0
    shared_bytes: int = 0        # static __shared__ memory per block
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    barriers: int = 0


@dataclass
class NvccReport:
    arch: str
    kernels: dict[str, KernelResources] = field(default_factory=dict)
    log: str = ""                # ptxas' verbose output, for humans
    cached: bool = False


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


def nvcc_available() -> str | None:
    """None when nvcc can be run, else why not and how to get it."""
    path = nvcc_path()
    if path is None:
        return "nvcc not found on PATH (install the CUDA toolkit and put its bin/ on PATH)"
    version = cache.tool_version(path)
    if "release" not in version:
        return f"nvcc at {path} does not run: {version.strip()[:200]}"
    return None


def nvcc_flags(arch: str, fail_on_spills: bool = False, allow_double: bool = True) -> list[str]:
    ptxas = ["-v", "-Werror"]
    if not allow_double:
        ptxas.append("-warn-double-usage")
    if fail_on_spills:
        ptxas.append("-warn-spills")
    return ["-cubin", f"-arch={arch}", "--Werror", "all-warnings", "-Xptxas", ",".join(ptxas)]


def parse_ptxas(log: str) -> dict[str, KernelResources]:
    """Per-entry-function resources from `ptxas -v` output (device functions are skipped)."""
    kernels: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = kernels.setdefault(m.group(1), KernelResources())
        elif m := _PROPS.search(line):
            current = kernels.get(m.group(1))  # None for non-inlined device functions
        elif current is not None and (m := _FRAME.search(line)):
            current.stack_frame_bytes, current.spill_store_bytes, current.spill_load_bytes = map(
                int, m.groups())
        elif current is not None and (m := _USED.search(line)):
            current.registers = int(m.group(1))
            if b := _BARRIERS.search(line):
                current.barriers = int(b.group(1))
            if s := _SMEM.search(line):
                current.shared_bytes = int(s.group(1))
    return kernels


def nvcc_check(source: str, arch: str = "sm_90", *, fail_on_spills: bool = False,
               allow_double: bool = True, timeout_s: float = 300.0) -> NvccReport:
    """Compile `source` with nvcc for `arch`; raise RefcompError on any error or warning."""
    reason = nvcc_available()
    if reason is not None:
        raise RefcompError(f"cannot check CUDA source: {reason}")
    nvcc = nvcc_path()
    assert nvcc is not None
    flags = nvcc_flags(arch, fail_on_spills, allow_double)
    key = cache.cache_key("nvcc-v1", source, *flags, cache.tool_version(nvcc))
    target = cache.cache_dir("nvcc") / f"{key}.json"
    cached = _read_report(target)
    if cached is not None:
        return cached
    with tempfile.TemporaryDirectory(prefix="refcomp-nvcc-") as work:
        src = Path(work) / "generated.cu"
        src.write_text(source)
        try:
            with stage("nvcc build"):
                proc = subprocess.run([nvcc, *flags, str(src), "-o", str(Path(work) / "out.cubin")],
                                      capture_output=True, text=True, timeout=timeout_s, cwd=work)
        except subprocess.TimeoutExpired as exc:
            raise RefcompError(f"nvcc took longer than {timeout_s} s") from exc
    output = (proc.stdout + proc.stderr).replace(str(src), "generated.cu")
    if proc.returncode != 0:
        raise RefcompError(f"nvcc rejected the generated source (warnings are errors):\n"
                           f"{_excerpt(output, source)}")
    kernels = parse_ptxas(output)
    report = NvccReport(arch, kernels, output)
    cache.write_atomically(target, json.dumps(
        {"arch": arch, "log": output, "kernels": {k: asdict(v) for k, v in kernels.items()}}))
    return report


def _read_report(target: Path) -> NvccReport | None:
    """The cached report, or None when there is none or it is damaged (then nvcc runs again)."""
    try:
        data = json.loads(target.read_text())
        kernels = {k: KernelResources(**v) for k, v in data["kernels"].items()}
        return NvccReport(data["arch"], kernels, data["log"], cached=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _excerpt(output: str, source: str, limit: int = 4000) -> str:
    """nvcc's message plus the source lines it points at (`generated.cu(12): error ...`)."""
    text = output.strip()[:limit]
    lines = source.splitlines()
    shown = []
    for m in re.finditer(r"generated\.cu\((\d+)\)", output):
        n = int(m.group(1))
        if n not in shown and 1 <= n <= len(lines) and len(shown) < 5:
            shown.append(n)
    if shown:
        text += "\n" + "\n".join(f"{n:5d} | {lines[n - 1]}" for n in shown)
    return text
