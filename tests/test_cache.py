"""The kernel cache cannot crash the process: damaged entries are rebuilt, unusable directories are
reported with the fix, concurrent builders all succeed.

Damaged libraries are built by a child process (as a previous run would have left them), so this
process never has them mapped: truncating a library a process has loaded kills that process with
SIGBUS, whatever refcomp does.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from refcomp.errors import CacheError, RefcompError
from refcomp.exec import emulator
from refcomp.codegen.abi import KernelSignature, Param
from refcomp.exec.emulator import EmulatorBackend
from refcomp.exec.nvcc import nvcc_check

AXPY = r"""
extern "C" __global__ void k_axpy(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""
KERNELS = [
    KernelSignature(
        "k_axpy", (Param("x", "const float*"), Param("y", "float*"), Param("n", "long long")), False
    )
]
X = np.arange(37, dtype=np.float32) - 5


def axpy(source: str, sanitize: bool = False) -> list[float]:
    """Load and launch `source` from the configured cache; the output as a list (picklable)."""
    be = EmulatorBackend(sanitize=sanitize)
    mod = be.load(source, KERNELS)
    x, y = be.upload(X), be.alloc(X.nbytes)
    mod.launch("k_axpy", (2, 1, 1), (32, 1, 1), [x, y, X.size])
    return be.download(y, X.shape, np.float32).tolist()


_together = None


def _start(barrier) -> None:
    global _together
    _together = barrier


def _axpy_together(source: str, sanitize: bool) -> list[float]:
    _together.wait(timeout=120)  # every child past its imports: the loads really overlap
    return axpy(source, sanitize)


def in_children(source: str, count: int, sanitize: bool = False) -> list[list[float]]:
    """Run `axpy` in `count` fresh processes at once. A child that crashes (SIGBUS from a bad
    library) breaks the pool, which fails the test instead of hanging it."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        count, mp_context=ctx, initializer=_start, initargs=(ctx.Barrier(count),)
    ) as pool:
        return list(pool.map(_axpy_together, [source] * count, [sanitize] * count))


def assert_right(out: list[float]) -> None:
    np.testing.assert_array_equal(out, 2 * X + 1)


@pytest.fixture
def cache_root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("REFCOMP_EMU_SANITIZE", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def source() -> str:
    """A source no other test (or earlier run) compiled, so no in-memory cache can answer."""
    return AXPY + f"// {uuid.uuid4()}\n"


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory):
    """Caches built by a child process, as an earlier run leaves them (one plain, one sanitized),
    built once per module; each test damages its own copy (`prebuilt_cache`)."""
    src, roots = AXPY + f"// {uuid.uuid4()}\n", {}
    for sanitize in (False, True):
        roots[sanitize] = tmp_path_factory.mktemp("prebuilt")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("REFCOMP_CACHE_DIR", str(roots[sanitize]))
            assert_right(in_children(src, 1, sanitize)[0])
    return src, roots


def prebuilt_copy(prebuilt, cache_root: Path, sanitize: bool = False) -> str:
    """This test's cache as a copy of a prebuilt one; the source it holds."""
    src, roots = prebuilt
    shutil.copytree(roots[sanitize], cache_root)
    return src


def only(pattern: str, root: Path) -> Path:
    (path,) = [p for p in (root / "emu").glob(pattern) if not p.name.endswith(".stamp")]
    return path


def load_counting_gxx(source: str, sanitize: bool = False) -> int:
    """Load and run in this process from the disk cache; how many times g++ ran."""
    emulator.clear_memory_cache()
    before = emulator.gxx_invocations()
    assert_right(axpy(source, sanitize))
    return emulator.gxx_invocations() - before


# ---- damaged libraries --------------------------------------------------------------------------

def _other_compiler(lib: Path) -> None:
    stamp = lib.with_name(lib.name + ".stamp")
    meta = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**meta, "compiler": "g++ (Another) 99.1.0"}))


DAMAGE = {
    "truncated": lambda lib: lib.write_bytes(lib.read_bytes()[:lib.stat().st_size // 2]),
    "empty": lambda lib: lib.write_bytes(b""),
    "garbage": lambda lib: lib.write_bytes(os.urandom(lib.stat().st_size)),
    "elf header only": lambda lib: lib.write_bytes(lib.read_bytes()[:64]),
    "directory": lambda lib: (lib.unlink(), (lib / "inner").mkdir(parents=True)),
    "stamp missing": lambda lib: lib.with_name(lib.name + ".stamp").unlink(),
    "stamp garbage": lambda lib: lib.with_name(lib.name + ".stamp").write_bytes(b"\xff{not json"),
    "stamp nested past recursion": lambda lib: lib.with_name(lib.name + ".stamp").write_bytes(
        b"[" * 100_000 + b"]" * 100_000),
    "stamp is a directory": lambda lib: (lib.with_name(lib.name + ".stamp").unlink(),
                                         lib.with_name(lib.name + ".stamp").mkdir()),
    "another compiler": _other_compiler,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_library_is_rebuilt(cache_root, prebuilt, damage):
    source = prebuilt_copy(prebuilt, cache_root)
    lib = only("*.so", cache_root)
    DAMAGE[damage](lib)
    assert load_counting_gxx(source) == 1
    assert lib.is_file()
    assert load_counting_gxx(source) == 0  # the rebuilt entry is trusted again


def test_library_damaged_after_loading_here_is_rebuilt(cache_root, source):
    """The issue's scenario in one process. The file is replaced, not truncated in place: this
    process has it mapped (see the module docstring)."""
    assert load_counting_gxx(source) == 1
    lib = only("*.so", cache_root)
    data = lib.read_bytes()
    lib.unlink()
    lib.write_bytes(data[:len(data) // 3])
    assert load_counting_gxx(source) == 1
    assert lib.stat().st_size > len(data) // 3


def test_stamped_garbage_is_rebuilt_once_after_dlopen_fails(cache_root, source):
    """A stamp that vouches for garbage (copied along with it) reaches dlopen; the OSError leads
    to one rebuild."""
    assert_right(in_children(source, 1)[0])
    lib = only("*.so", cache_root)
    stamp = lib.with_name(lib.name + ".stamp")
    garbage = b"\x7fELF" + os.urandom(4000)
    lib.write_bytes(garbage)
    stamp.write_text(
        json.dumps({**json.loads(stamp.read_text()), "sha256": hashlib.sha256(garbage).hexdigest()})
    )
    assert load_counting_gxx(source) == 1


@pytest.fixture
def fake_gxx(tmp_path, monkeypatch) -> Path:
    """A "compiler" that succeeds and writes a file no loader accepts."""
    script = tmp_path / "fake-gxx"
    script.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo "fake-c++ 0.1"; exit 0; fi\n'
                      'while [ $# -gt 0 ]; do [ "$1" = -o ] && printf "not an ELF file" > "$2"; shift; done\n'
                      'exit 0\n')
    script.chmod(0o755)
    monkeypatch.setenv("REFCOMP_CXX", str(script))
    return script


def test_unloadable_library_is_a_refcomp_error_naming_it(cache_root, source, fake_gxx):
    before = emulator.gxx_invocations()
    with pytest.raises(CacheError) as info:
        EmulatorBackend().load(source, KERNELS)
    assert emulator.gxx_invocations() == before + 2  # built, rejected by dlopen, rebuilt once
    assert str(only("*.so", cache_root)) in str(info.value) and "REFCOMP_CACHE_DIR" in str(info.value)


# ---- the sanitizer runner -----------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "directory"])
def test_damaged_runner_is_rebuilt(cache_root, prebuilt, damage):
    source = prebuilt_copy(prebuilt, cache_root, sanitize=True)
    runner = only("runner-*", cache_root)
    DAMAGE[damage](runner)
    assert load_counting_gxx(source, sanitize=True) == 1
    assert load_counting_gxx(source, sanitize=True) == 0


def test_unrunnable_runner_is_a_refcomp_error_naming_it(cache_root, source, fake_gxx):
    mod = EmulatorBackend(sanitize=True).load(source, KERNELS)  # the runner process loads it
    before = emulator.gxx_invocations()
    be = EmulatorBackend(sanitize=True)
    with pytest.raises(CacheError) as info:
        mod.launch("k_axpy", (1, 1, 1), (32, 1, 1), [be.upload(X), be.alloc(X.nbytes), X.size])
    assert emulator.gxx_invocations() == before + 2
    assert str(only("runner-*", cache_root)) in str(info.value)


# ---- unusable cache directories -----------------------------------------------------------------

def _file(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("not a directory")
    return tmp_path / "a-file"


def _emu_is_a_file(tmp_path: Path) -> Path:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "emu").write_text("")
    return tmp_path / "cache"


UNUSABLE = {
    "is a file": _file,
    "under a file": lambda tmp: _file(tmp) / "cache",
    "under /proc": lambda tmp: Path("/proc") / f"refcomp-{uuid.uuid4()}",
    "emu is a file": _emu_is_a_file,
}


@pytest.mark.parametrize("where", list(UNUSABLE))
def test_unusable_cache_dir_names_path_and_fix(tmp_path, monkeypatch, source, where):
    root = UNUSABLE[where](tmp_path)
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(root))
    with pytest.raises(RefcompError) as info:
        EmulatorBackend().load(source, KERNELS)
    assert isinstance(info.value, CacheError)
    assert str(root) in str(info.value) and "set REFCOMP_CACHE_DIR to a writable directory" in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a chmod 555 directory anyway")
def test_read_only_cache_dir_names_path_and_fix(tmp_path, monkeypatch, source):
    (tmp_path / "ro").mkdir(mode=0o555)
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "ro"))
    with pytest.raises(CacheError, match="REFCOMP_CACHE_DIR") as info:
        EmulatorBackend().load(source, KERNELS)
    assert str(tmp_path / "ro") in str(info.value)


def test_missing_cache_dir_is_created(tmp_path, monkeypatch, source):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "not" / "yet" / "there"))
    assert load_counting_gxx(source) == 1
    assert only("*.so", tmp_path / "not" / "yet" / "there").is_file()


# ---- concurrency --------------------------------------------------------------------------------

@pytest.mark.parametrize("start", ["empty cache", "damaged entry"])
def test_concurrent_processes_build_and_load(cache_root, source, start):
    if start == "damaged entry":
        assert_right(in_children(source, 1)[0])
        DAMAGE["truncated"](only("*.so", cache_root))
    for out in in_children(source, 4):
        assert_right(out)
    assert not list((cache_root / "emu").glob(".*.tmp"))  # every temporary file was renamed or removed
    assert load_counting_gxx(source) <= 1


# ---- nvcc reports -------------------------------------------------------------------------------

PTXAS = ("ptxas info    : Compiling entry function 'k_axpy' for 'sm_90'\n"
         "ptxas info    : Used 12 registers, 352 bytes cmem[0]\n")


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch, cache_root) -> Path:
    """An nvcc that prints a ptxas log and counts its compilations in a file."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "nvcc-calls"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text(
        f'#!/bin/sh\n'
        f'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 12.8 (fake)"; exit 0; fi\n'
        f"echo x >> {calls}\ncat >&2 <<'EOF'\n{PTXAS}EOF\n"
    )
    (bin_dir / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def nvcc_runs(calls: Path) -> int:
    return len(calls.read_text().split()) if calls.exists() else 0


NVCC_DAMAGE = {
    "truncated": lambda p: p.write_text(p.read_text()[:40]),
    "empty": lambda p: p.write_text(""),
    "garbage": lambda p: p.write_bytes(b"\xff\xfe\x00garbage"),
    "directory": lambda p: (p.unlink(), p.mkdir()),
    "wrong shape": lambda p: p.write_text('{"arch": "sm_90", "kernels": [1, 2], "log": ""}'),
    "missing key": lambda p: p.write_text('{"arch": "sm_90"}'),
    "unknown field": lambda p: p.write_text('{"arch": "sm_90", "log": "", "kernels": {"k": {"x": 1}}}'),
    "not an object": lambda p: p.write_text("[]"),
}


@pytest.mark.parametrize("damage", list(NVCC_DAMAGE))
def test_damaged_nvcc_report_is_recomputed(cache_root, source, fake_nvcc, damage):
    first = nvcc_check(source)
    assert not first.cached and first.kernels["k_axpy"].registers == 12 and nvcc_runs(fake_nvcc) == 1
    (report,) = (cache_root / "nvcc").glob("*.json")
    NVCC_DAMAGE[damage](report)
    again = nvcc_check(source)
    assert not again.cached and again.kernels == first.kernels and nvcc_runs(fake_nvcc) == 2
    assert nvcc_check(source).cached and nvcc_runs(fake_nvcc) == 2


def test_nvcc_cache_dir_under_a_file(tmp_path, monkeypatch, source, fake_nvcc):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(_file(tmp_path) / "cache"))
    with pytest.raises(CacheError, match="REFCOMP_CACHE_DIR"):
        nvcc_check(source)


# ---- compiled templates -------------------------------------------------------------------------

def _render_prelude(compiles: list) -> str:
    """The prelude rendered by a fresh Jinja environment on the template cache, noting each compile."""
    import jinja2
    from refcomp.codegen.kernels import TEMPLATES
    from refcomp.exec.cache import TemplateCache

    class Counting(jinja2.Environment):
        def compile(self, *args, **kwargs):
            compiles.append(args)
            return super().compile(*args, **kwargs)

    env = Counting(loader=jinja2.FileSystemLoader(str(TEMPLATES)), bytecode_cache=TemplateCache())
    return env.get_template("prelude.cu.j2").render(kernel_count=1, dtypes={"float16"}, compensated=False)


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_templates_are_kept_compiled_and_a_damaged_one_is_compiled_again(cache_root, damage):
    compiles: list = []
    expected = _render_prelude(compiles)
    (path,) = (cache_root / "templates").glob("*.bc")
    assert len(compiles) == 1
    assert _render_prelude(compiles) == expected and len(compiles) == 1  # loaded, not compiled
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if damage == "truncated" else data[:-1] + bytes([data[-1] ^ 1]))
    assert _render_prelude(compiles) == expected and len(compiles) == 2
    assert _render_prelude(compiles) == expected and len(compiles) == 2  # the rewritten file serves again


def test_an_unusable_cache_costs_templates_only_their_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(_file(tmp_path) / "cache"))
    compiles: list = []
    assert _render_prelude(compiles) == _render_prelude(compiles) and len(compiles) == 2
