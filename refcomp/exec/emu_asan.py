"""Sanitizer mode: launches of an AddressSanitizer-built library run in a child runner process.

An ASan library cannot be loaded into an uninstrumented Python, so each launch runs in a small
ASan-linked C++ runner process: buffers travel through a temporary file, the runner copies each into
its own exactly-sized malloc block (numpy's allocation slack would hide a one-past-the-end write),
runs the kernel (with the same grid runner, worker threads included), and writes the buffers back.
An ASan report becomes a RefcompError carrying the report's first lines and a map of the buffers.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from refcomp.errors import RefcompError
from refcomp.exec import cache
from ..codegen.abi import Dim3, KernelSignature
from .emu_build import SANITIZE_FLAGS, gxx_path, memory_cache, run_gxx

ASAN_EXIT_CODE = 86

_RUNNER_SOURCE = r"""
// Runs one emulator launch of an ASan-built kernel library; see emulator.py.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef int (*launch_t)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, int, void (*)(void*), void**);
typedef const char* (*error_t)(void);
// argv: lib call-symbol mode gx gy gz bx by bz datafile nbufs (offset nbytes)* nargs (b<buf>|i<value>)*
int main(int argc, char** argv) {
    if (argc < 13) { fprintf(stderr, "refcomp emulator runner: bad arguments\n"); return 2; }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen failed: %s\n", dlerror()); return 2; }
    launch_t launch = (launch_t)dlsym(lib, "refcomp_emu_launch");
    void (*call)(void*) = (void (*)(void*))dlsym(lib, argv[2]);
    error_t error = (error_t)dlsym(lib, "refcomp_emu_error");
    if (!launch || !call || !error) { fprintf(stderr, "missing symbol %s\n", argv[2]); return 2; }
    int mode = atoi(argv[3]);
    unsigned d[6];
    for (int i = 0; i < 6; ++i) d[i] = (unsigned)strtoul(argv[4 + i], 0, 10);
    FILE* f = fopen(argv[10], "r+b");
    if (!f) { perror(argv[10]); return 2; }
    int a = 11, nb = atoi(argv[a++]);
    char** bufs = (char**)calloc(nb + 1, sizeof(char*));
    long long* offs = (long long*)calloc(nb + 1, sizeof(long long));
    long long* sizes = (long long*)calloc(nb + 1, sizeof(long long));
    for (int b = 0; b < nb; ++b) {
        offs[b] = strtoll(argv[a++], 0, 10);
        sizes[b] = strtoll(argv[a++], 0, 10);
        bufs[b] = (char*)malloc((size_t)sizes[b]);  // exactly sized: ASan sees one-past-end
        fseek(f, offs[b], SEEK_SET);
        if (fread(bufs[b], 1, (size_t)sizes[b], f) != (size_t)sizes[b]) { fprintf(stderr, "short read\n"); return 2; }
    }
    for (int b = 0; b < nb; ++b)  // lets the Python side name the buffer in an ASan report
        fprintf(stderr, "refcomp-buffer %d %p %p\n", b, (void*)bufs[b], (void*)(bufs[b] + sizes[b]));
    int na = atoi(argv[a++]);
    void** args = (void**)calloc(na + 1, sizeof(void*));
    long long* ints = (long long*)calloc(na + 1, sizeof(long long));
    for (int i = 0; i < na; ++i) {
        const char* s = argv[a++];
        if (s[0] == 'b') args[i] = bufs[atoi(s + 1)];
        else { ints[i] = strtoll(s + 1, 0, 10); args[i] = &ints[i]; }
    }
    if (launch(d[0], d[1], d[2], d[3], d[4], d[5], mode, call, args)) { fprintf(stderr, "%s\n", error()); return 3; }
    for (int b = 0; b < nb; ++b) {
        fseek(f, offs[b], SEEK_SET);
        fwrite(bufs[b], 1, (size_t)sizes[b], f);
        free(bufs[b]);
    }
    fclose(f);
    return 0;
}
"""  # noqa: E501 - C source kept byte-identical (a `\` continuation cannot shorten a raw string)


def _runner_path(root: str | None = None, force: bool = False) -> Path:
    gxx = gxx_path()
    key = cache.cache_key("runner", _RUNNER_SOURCE, cache.tool_version(gxx), *SANITIZE_FLAGS)
    target = cache.cache_dir("emu", root) / f"runner-{key[:32]}"
    if not force and memory_cache.get(str(target)) == target:  # verified once per process
        return target

    def build(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="refcomp-emu-") as work:
            src = Path(work) / "runner.cpp"
            src.write_text(_RUNNER_SOURCE)
            run_gxx([gxx, *SANITIZE_FLAGS, "-x", "c++", str(src), "-o", str(tmp), "-ldl"],
                     _RUNNER_SOURCE, "the sanitizer runner")
        tmp.chmod(0o755)

    meta = {"key": key, "compiler": cache.tool_version(gxx)}
    memory_cache[str(target)] = cache.cached_build(target, build, meta, force)
    return target


def _run_runner(args: list[str], env: dict[str, str], root: str | None) -> subprocess.CompletedProcess:
    """Run the sanitizer runner; one the OS cannot execute is rebuilt once, then reported."""
    for force in (False, True):
        runner = _runner_path(root, force)
        try:
            return subprocess.run([str(runner), *args], capture_output=True, text=True, env=env)
        except OSError as exc:
            error = exc
    raise cache.broken_after_rebuild("run the sanitizer runner", runner, error)


def _buffer_map(sig: KernelSignature, bound: Any, runner_lines: list[str]) -> str:
    """'out0=[0x..,0x..) (256 bytes)' per buffer, from the addresses the runner printed."""
    spans = {}
    for line in runner_lines:
        if line.startswith("refcomp-buffer "):
            _, index, lo, hi = line.split()
            spans[int(index)] = f"[{lo}, {hi}) ({bound.buffers[int(index)].nbytes} bytes)"
    return ", ".join(f"{p.ident}={spans.get(v, '?')}" for p, (kind, v) in zip(sig.params, bound.slots)
                     if kind == "b")



def launch_sanitized(library: Path, sig: KernelSignature, mode: int, g: Dim3, b: Dim3, bound: Any,
                     cache_root: str | None) -> None:
    """Run one launch in the ASan runner process; buffers go there and back through a file."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.NamedTemporaryFile(prefix="refcomp-asan-", dir=shm) as data:
        offsets = []
        for buf in bound.buffers:
            offsets.append(data.tell())
            data.write(memoryview(buf).cast("B"))
        data.flush()
        argv = [str(library), f"refcomp_call_{sig.name}", str(mode),
                *map(str, g), *map(str, b), data.name, str(len(bound.buffers))]
        for off, buf in zip(offsets, bound.buffers):
            argv += [str(off), str(buf.nbytes)]
        argv += [str(len(bound.slots)), *(f"{kind}{v}" for kind, v in bound.slots)]
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        env["ASAN_OPTIONS"] = (f"detect_leaks=0:halt_on_error=1:exitcode={ASAN_EXIT_CODE}:"
                               "detect_stack_use_after_return=0:verify_asan_link_order=0")
        proc = _run_runner(argv, env, cache_root)
        where = f"kernel {sig.name} (grid {g}, block {b})"
        if proc.returncode == ASAN_EXIT_CODE or "ERROR: AddressSanitizer" in proc.stderr:
            lines = proc.stderr.splitlines()
            start = next((i for i, l in enumerate(lines) if "ERROR: AddressSanitizer" in l), 0)
            report = "\n".join(lines[start:start + 30])
            raise RefcompError(f"AddressSanitizer found a bad memory access in {where}:\n{report}\n"
                               f"buffers: {_buffer_map(sig, bound, lines)}")
        if proc.returncode != 0:
            raise RefcompError(f"{where} failed in the sanitized emulator (exit {proc.returncode}):"
                               f" {proc.stderr.strip()[-2000:]}")
        out = np.fromfile(data.name, dtype=np.uint8)
    for off, buf, written in zip(offsets, bound.buffers, bound.written):
        if written:
            buf.reshape(-1).view(np.uint8)[:] = out[off:off + buf.nbytes]
