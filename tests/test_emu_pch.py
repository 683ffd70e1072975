"""The emulator's precompiled shim (exec/emu_build.precompiled_shim): made at a cache's second build,
shared by every later one, trusted only through its stamp, and never a change in what is built; and
its grid runner (emu_build.runtime_object), compiled once per flag set and linked into each library."""
from __future__ import annotations

import shutil
import uuid

import numpy as np
import pytest

from refcomp.codegen.abi import KernelSignature, Param
from refcomp.errors import RefcompError
from refcomp.exec import emu_build, emulator
from refcomp.exec.emulator import EmulatorBackend

SCALE = r"""
extern "C" __global__ void k_scale(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = expf(x[i]) * %s;
}
"""
KERNELS = [
    KernelSignature(
        "k_scale", (Param("x", "const float*"), Param("y", "float*"), Param("n", "long long")), False
    )
]
X = np.linspace(-2, 2, 40, dtype=np.float32)


def scale(factor: float, comment: str = "") -> np.ndarray:
    """Build (or load) k_scale with this factor, run it on X and check it against float64 NumPy."""
    be = EmulatorBackend()
    mod = be.load(SCALE % f"{factor!r}f" + f"// {comment or uuid.uuid4()}\n", KERNELS)
    x, y = be.upload(X), be.alloc(X.nbytes)
    mod.launch("k_scale", (1, 1, 1), (64, 1, 1), [x, y, X.size])
    got = be.download(y, X.shape, np.float32)
    np.testing.assert_allclose(got, np.exp(X.astype(np.float64)) * factor, rtol=1e-6)
    return got


def counts() -> tuple[int, int]:
    """(libraries built, shims precompiled) by this process so far."""
    return emu_build.gxx_invocations(), emu_build.pch_builds()


def gch_files(root):
    return sorted((root / "pch").glob("*/emu_shim.h.gch"))


def use_cache(monkeypatch, root) -> None:
    """A fresh process's view of the cache at `root`: nothing loaded or verified yet."""
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(root))
    monkeypatch.delenv(emu_build.PCH_ENV, raising=False)
    monkeypatch.delenv("REFCOMP_EMU_SANITIZE", raising=False)
    monkeypatch.setattr(emu_build, "_builds_without_pch", {})
    emulator.clear_memory_cache()


@pytest.fixture(scope="module")
def precompiled(tmp_path_factory):
    """A cache after two builds: the first parsed the shim, the second precompiled it and used it.
    (root, the second source's comment, what each build cost)."""
    root, comment, steps = tmp_path_factory.mktemp("precompiled"), str(uuid.uuid4()), []
    with pytest.MonkeyPatch.context() as mp:
        use_cache(mp, root)
        for factor, note in ((2.0, ""), (3.0, comment)):
            before = counts()
            scale(factor, note)
            steps.append(tuple(b - a for a, b in zip(before, counts())))
            steps[-1] += (len(gch_files(root)),)
        emulator.clear_memory_cache()
    return root, comment, steps


def test_the_second_build_precompiles_and_later_ones_share_it(precompiled, monkeypatch):
    root, _, steps = precompiled
    assert steps == [(1, 0, 0), (1, 1, 1)]  # (libraries, precompiled headers, .gch files in the cache)
    use_cache(monkeypatch, root)
    before = counts()
    scale(0.5)
    assert counts() == (before[0] + 1, before[1])


def test_a_library_built_with_the_precompiled_shim_has_the_same_bytes(precompiled, monkeypatch, tmp_path):
    root, comment, _ = precompiled
    use_cache(monkeypatch, tmp_path / "parsed")
    monkeypatch.setenv(emu_build.PCH_ENV, "0")
    before = counts()
    scale(3.0, comment)
    scale(4.0)
    assert counts() == (before[0] + 2, before[1]) and not (tmp_path / "parsed" / "pch").exists()
    parsed = next(p for p in (tmp_path / "parsed" / "emu").glob("*.so") if (root / "emu" / p.name).exists())
    assert (root / "emu" / parsed.name).read_bytes() == parsed.read_bytes()


def test_a_damaged_or_planted_copy_is_made_again_never_used(precompiled, monkeypatch, tmp_path):
    """A .gch or header copy that is not what refcomp made is code someone else wrote: the .gch fails
    its stamp and is rebuilt, the header copy is rewritten from the package's bytes."""
    shutil.copytree(precompiled[0], tmp_path / "cache")
    (gch,) = gch_files(tmp_path / "cache")
    gch.write_bytes(gch.read_bytes()[:4096])
    header = gch.with_name("emu_shim.h")
    header.write_text(header.read_text() + "\n#define expf(x) 0.0f\n")
    use_cache(monkeypatch, tmp_path / "cache")
    emu_build.memory_cache.clear()  # as a new process: the copies are checked again
    before = counts()
    scale(5.0)
    assert counts() == (before[0] + 1, before[1] + 1)
    assert header.read_bytes() == emu_build.SHIM_PATH.read_bytes() and gch.stat().st_size > 4096


def test_a_compiler_that_cannot_precompile_still_builds(monkeypatch, tmp_path):
    real = emu_build.run_gxx

    def no_headers(args, text, what, library=True, **more):
        if not library:
            raise RefcompError("this compiler cannot precompile headers")
        real(args, text, what, library, **more)

    use_cache(monkeypatch, tmp_path / "cache")
    monkeypatch.setattr(emu_build, "run_gxx", no_headers)
    before = emu_build.gxx_invocations()
    scale(1.5)
    scale(2.5)  # the second build tries to precompile, and parses the shim instead
    assert emu_build.gxx_invocations() == before + 2 and gch_files(tmp_path / "cache") == []


def test_the_grid_runner_is_compiled_once_and_a_damaged_object_is_compiled_again(monkeypatch, tmp_path):
    """Libraries of one cache link one runtime object; the runner's errors (a barrier in a kernel run
    as plain threads) still reach the launch that caused them; an object that fails its stamp is
    compiled again, never linked."""
    use_cache(monkeypatch, tmp_path / "cache")
    scale(1.25)
    scale(1.75)
    (runtime,) = (tmp_path / "cache" / "emu").glob("runtime-*.o")
    barrier = KernelSignature("k_wait", (Param("y", "float*"),), False)
    be = EmulatorBackend()
    source = 'extern "C" __global__ void k_wait(float* y) { __syncthreads(); y[0] = 1.0f; }\n'
    bad = be.load(source, [barrier])
    with pytest.raises(RefcompError, match="uses_barrier=False"):
        bad.launch("k_wait", (1, 1, 1), (2, 1, 1), [be.alloc(4)])
    assert scale(2.25)[0] > 0, "the other library runs as before"
    runtime.write_bytes(b"not an object file")  # damaged: its stamp fails, and it is compiled again
    emu_build.memory_cache.clear()
    emulator.clear_memory_cache()
    scale(2.75)
    assert runtime.read_bytes()[:4] == b"\x7fELF"
