"""The emulator's vector lanes, instruction set and optimised build change no bit of any result.

The shim's region loops are `omp simd` (built with -fopenmp-simd), libraries are built for the
machine's own instruction set (emu_build.native_flags), and a module that keeps running switches to
the optimised build (emu_build.OPTIMIZED_FLAGS): all only let the compiler run a block's threads
side by side, each thread's floating-point operations in its own order. So a library built without
them, one thread after another in baseline x86-64 at -O1, must give the same bytes, for the
generated templates (matmul, softmax, long sums, attention, GELU) and for any worker count.
"""
from __future__ import annotations

import numpy as np
import pytest

from refcomp.exec import emu_build, emulator
from refcomp.exec.emulator import EmulatorBackend


def _serial_flags():
    return tuple(f for f in emulator.FAST_FLAGS if f != "-fopenmp-simd")


def _run(prog, feeds, monkeypatch, *, build: str, workers: str = "2", dims=None):
    """One run in a fresh module, of the `build`: "serial" (no simd, baseline ISA, -O1), "default"
    (what a first load builds) or "optimized"."""
    monkeypatch.setenv(emulator.THREADS_ENV, workers)
    if build == "serial":
        monkeypatch.setattr(emulator, "FAST_FLAGS", _serial_flags())
        monkeypatch.setenv(emu_build.NATIVE_ENV, "0")
    else:
        monkeypatch.setattr(emulator, "FAST_FLAGS", emu_build.FAST_FLAGS)
        monkeypatch.delenv(emu_build.NATIVE_ENV, raising=False)
    monkeypatch.setenv(emulator.OPTIMIZE_ENV, "now" if build == "optimized" else "0")
    prog._modules.clear()  # load again, with these flags
    try:
        return prog.run(feeds, backend="emulator", dims=dims)
    finally:
        prog._modules.clear()


def _bits(result):
    if isinstance(result, dict):
        return {k: np.ascontiguousarray(v).view(np.uint32).copy() for k, v in result.items()}
    return np.ascontiguousarray(result).view(np.uint32).copy()


def _assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    else:
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def gpt2():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import refcomp as rc
    from examples.gpt2_block import build_block, numpy_block
    out, weights = build_block()
    x = np.random.default_rng(1).standard_normal((1, 64, 128)).astype(np.float32)
    return rc.compile(out), {"x": x, **weights}, numpy_block(x, weights)


def test_gpt2_block_vector_lanes_and_worker_counts_change_no_bit(gpt2, monkeypatch):
    prog, feeds, oracle = gpt2
    serial = _bits(_run(prog, feeds, monkeypatch, build="serial", workers="1"))
    for build, workers in (("default", "1"), ("default", "3"), ("optimized", "1"), ("optimized", "2")):
        _assert_same(serial, _bits(_run(prog, feeds, monkeypatch, build=build, workers=workers)))
    np.testing.assert_allclose(serial.view(np.float32), oracle, atol=2e-4)


def test_region_templates_vector_lanes_change_no_bit(monkeypatch):
    """Every barrier template, at a row count that leaves partial tiles and partial vectors."""
    import refcomp as rc
    x, w = rc.input("x", ("B", 300)), rc.input("w", (300, 40))
    prog = rc.compile({"y": (x @ w).relu().softmax(-1), "m": x @ w + 1.0, "s": (x * x).sum(-1),
                       "n": rc.nn.layer_norm(x, rc.input("g", (300,)), rc.input("b", (300,)))},
                      dims_hint={"B": 4096})
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((97, 300)).astype(np.float32),
             "w": rng.standard_normal((300, 40)).astype(np.float32),
             "g": rng.standard_normal(300).astype(np.float32),
             "b": rng.standard_normal(300).astype(np.float32)}
    feeds["x"][5, 7] = np.inf  # non-finite values take the templates' other branches
    feeds["x"][11, 3] = np.nan
    serial = _bits(_run(prog, feeds, monkeypatch, build="serial", workers="1"))
    for build in ("default", "optimized"):
        _assert_same(serial, _bits(_run(prog, feeds, monkeypatch, build=build, workers="2")))


def test_native_flags_are_spelt_out_and_keyed(monkeypatch):
    """`-march=native` is passed as the options it stands for, so the cache key names the target,
    and REFCOMP_EMU_NATIVE=0 leaves them out."""
    gxx = emu_build.gxx_path()
    native = emu_build.native_flags(gxx)
    assert "-march=native" not in native
    assert not native or any(f.startswith("-march=") for f in native)
    monkeypatch.delenv(emu_build.NATIVE_ENV, raising=False)
    assert emu_build.fast_flags(gxx) == emu_build.FAST_FLAGS + native
    monkeypatch.setenv(emu_build.NATIVE_ENV, "0")
    assert emu_build.fast_flags(gxx) == emu_build.FAST_FLAGS


def test_another_instruction_set_is_another_library(monkeypatch, tmp_path):
    from refcomp.codegen.abi import KernelSignature, Param
    source = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = 1.0f; }\n'
    sig = KernelSignature("k", (Param("o", "float*"),), False)
    monkeypatch.delenv(emu_build.NATIVE_ENV, raising=False)
    built = []
    for target in (("-mno-avx",), ("-mno-avx", "-mno-sse4.2")):
        monkeypatch.setattr(emu_build, "native_flags", lambda gxx, target=target: target)
        before = emu_build.gxx_invocations()
        EmulatorBackend(cache_dir=tmp_path).load(source, [sig])
        built.append(emu_build.gxx_invocations() - before)
    assert built == [1, 1]


def test_a_module_that_keeps_running_switches_to_the_optimized_build(monkeypatch, tmp_path):
    """After OPTIMIZE_AFTER_RUNS runs the optimised library is built in the background (counted
    apart from gxx_invocations) and replaces the -O1 one; the next load finds it in the cache."""
    import refcomp as rc
    from refcomp.exec import backends
    monkeypatch.delenv(emulator.OPTIMIZE_ENV, raising=False)
    backend = EmulatorBackend(cache_dir=tmp_path)
    monkeypatch.setattr(backends, "_instance", lambda name: backend)
    x = rc.input("x", (70, 50))
    prog = rc.compile({"y": (x @ x.T).softmax(-1)})
    feeds = {"x": np.random.default_rng(0).standard_normal((70, 50)).astype(np.float32)}
    first = _bits(prog.run(feeds, backend="emulator"))
    module = prog._modules["emulator"]
    o1_library, before = module._library, emu_build.optimized_builds()
    for _ in range(emulator.OPTIMIZE_AFTER_RUNS):
        _assert_same(first, _bits(prog.run(feeds, backend="emulator")))
    assert emulator.wait_for_optimized_builds(timeout=300)
    assert emu_build.optimized_builds() == before + 1
    _assert_same(first, _bits(prog.run(feeds, backend="emulator")))  # switches at its first launch
    assert module._library is not o1_library and module._upgrade is None
    emulator.clear_memory_cache()
    gxx = emu_build.gxx_invocations()
    again = backend.load(prog.source, [k.signature for k in prog.kernels])
    assert again._upgrade is None and emu_build.gxx_invocations() == gxx  # the optimised build, from disk
