"""Loads of a matmul's operand A that vary along one tile axis only, made once (codegen/staged.py): a
layer norm's weight and bias (k alone) staged in shared memory per K step, its carried statistics (the
row alone) loaded into registers before the K loop, and the row's mean and reciprocal deviation
computed from them there. Checked against NumPy written directly (float64)
on the emulator at bindings with partial tiles, for every template variant; the memory model's counts
against the profiler's; bounds under the sanitizer; nvcc for sm_90."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.profile import model_disagreements
from refcomp.ops.nn import layer_norm
from refcomp.pipeline.assemble import program_for_schedule
from norm_block import EPS, block as _block, feeds as _feeds, want as _want
from fusion_checks import sanitized_run


def _scopes(kernel) -> list:
    return sorted((a.scope, a.buffer) for a in kernel.plan.accesses if a.scope in ("a_cols", "a_rows"))


@pytest.fixture(scope="module")
def small():
    """d = 200 (K's last tile part-full at 16 and 32), f = 300, priced at 32 rows."""
    outputs = _block(200, 300)
    return outputs, rc.compile(outputs, dims_hint={"B": 32}, cache=False)


def _reader(prog):
    """The matmul that normalises its rows as it loads them."""
    (kernel,) = [k for k in prog.kernels if any(a.scope == "a_cols" for a in k.plan.accesses)]
    return kernel


def test_the_norms_weight_and_bias_are_staged_and_its_statistics_held(small):
    """The reader loads w[k] and b[k] once per K step (row 0 of the block, into Kcols0 and Kcols1), and
    each row's S and V once (arows0, arows1): none of the four is loaded in the tile loop any more."""
    outputs, prog = small
    reader = _reader(prog)
    stats = prog.kernels[0].row_stats
    names = {n.id: f"in{k}" for k, n in enumerate(reader.reads)}
    held = sorted(("a_rows", names[n.id]) for n in stats)
    weights = sorted(("a_cols", f"in{k}") for k, n in enumerate(reader.reads)
                     if n.op.name == "Input" and n.attrs["name"] in ("g", "be"))
    assert _scopes(reader) == sorted(held + weights)
    moved = dict(held + weights).values()
    assert not [a for a in reader.plan.accesses if a.scope == "a" and a.buffer in moved]
    for text in ("Kcols0", "Kcols1", "arows0[RC_SLOT]", "arows1[RC_SLOT]", "2 load(s) of A per K step"):
        assert text in reader.source
    # the row's mean and reciprocal deviation, computed from S and V once a thread, not once per k
    assert reader.plan.held_values > 0 and reader.source.count("sqrtf(") == 1
    assert reader.source.index("sqrtf(") < reader.source.index("for (long long k0")
    for rows in (32, 1, 17, 40):
        feeds = _feeds(rows, 200, 300, seed=rows)
        np.testing.assert_allclose(prog.run(feeds, backend="emulator")["y"], _want(feeds),
                                   **golden.FLOAT32_TOLERANCE)


VARIANTS = [(16, 1, 1), (32, 1, 1), (16, 4, 1), (32, 16, 1), (16, 1, 4), (16, 3, 4)]  # tile, splits, slices


@pytest.mark.parametrize("tile,splits,slices", VARIANTS)
def test_every_template_variant_reads_the_staged_values(small, tile, splits, slices):
    """K split across blocks (each stages its share of K's steps, each loads its rows' values) and
    across a block's threads (each slice stages its own K tile): the sums and the counts hold."""
    outputs, base = small
    root = _reader(base).output.id
    params = {(root, "tile"): tile, (root, "splits"): splits, (root, "slices"): slices}
    prog = program_for_schedule(outputs, base.search, base.search.schedule.with_params(params))
    reader = _reader(prog)
    assert (reader.launch.block, reader.launch.splits, reader.launch.slices) == (tile, splits, slices)
    for rows in (33, 2):
        feeds = _feeds(rows, 200, 300, seed=tile + splits + rows)
        np.testing.assert_allclose(prog.run(feeds, backend="emulator")["y"], _want(feeds),
                                   **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(_feeds(33, 200, 300))) == []


@pytest.mark.parametrize("splits,slices", [(1, 1), (4, 1), (1, 4)])
def test_every_staged_load_stays_in_its_buffer(small, splits, slices):
    outputs, base = small
    root = _reader(base).output.id
    sched = base.search.schedule.with_params({(root, "splits"): splits, (root, "slices"): slices})
    prog = program_for_schedule(outputs, base.search, sched)
    feeds = _feeds(17, 200, 300, seed=11)
    np.testing.assert_allclose(sanitized_run(prog, feeds)["y"], _want(feeds), **golden.FLOAT32_TOLERANCE)


def _batched():
    """A batched matmul (blockIdx.z the batch) whose A scales x by s[b, k] (padded along k with 1s past
    45: a masked load) and by t[b, m]."""
    x, s, t = rc.input("x", (3, "M", 50)), rc.input("s", (3, 1, 45)), rc.input("t", (3, "M", 1))
    w = rc.input("w", (3, 50, 24))
    return {"y": (x * s.pad([(0, 0), (0, 0), (0, 5)], value=1.0) * t) @ w}


def _batched_want(feeds):
    f = {k: v.astype(np.float64) for k, v in feeds.items()}
    s = np.concatenate([f["s"], np.ones((3, 1, 5))], axis=-1)
    return (f["x"] * s * f["t"]) @ f["w"]


def _batched_feeds(m, seed):
    rng = np.random.default_rng(seed)
    shapes = {"x": (3, m, 50), "s": (3, 1, 45), "t": (3, m, 1), "w": (3, 50, 24)}
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


def test_batched_and_masked_loads_are_staged_per_block():
    """blockIdx.z (the batch) in a staged index, and the pad's mask on a staged load: its columns
    past the pad read 1, the sums NumPy's."""
    outputs = _batched()
    prog = rc.compile(outputs, dims_hint={"M": 20}, cache=False)
    (kernel,) = [k for k in prog.kernels if k.kind == "matmul"]
    assert {scope for scope, _ in _scopes(kernel)} == {"a_cols", "a_rows"}
    for m in (20, 1, 37):
        feeds = _batched_feeds(m, m)
        np.testing.assert_allclose(prog.run(feeds, backend="emulator")["y"], _batched_want(feeds),
                                   **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(_batched_feeds(37, 1))) == []
    feeds = _batched_feeds(17, 2)
    np.testing.assert_allclose(sanitized_run(prog, feeds)["y"], _batched_want(feeds),
                               **golden.FLOAT32_TOLERANCE)


def test_the_kernels_build_with_nvcc(small):
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    outputs, base = small
    root = _reader(base).output.id
    for params in ({(root, "splits"): 1, (root, "slices"): 1}, {(root, "splits"): 4, (root, "slices"): 4}):
        prog = program_for_schedule(outputs, base.search, base.search.schedule.with_params(params))
        assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}
    batched = rc.compile(_batched(), dims_hint={"M": 20}, cache=False)
    assert set(nvcc_check(batched.source).kernels) == {k.name for k in batched.kernels}


def _profiled_flops(prog, feeds) -> list[int]:
    """Each kernel's float operations as the profiler counts them executed (exec/profile.py)."""
    return [k.counters.flops for k in prog.profile(feeds).kernels]


def test_the_models_flops_count_what_the_loads_recompute():
    """A node fused into A's loads runs once per A element per block column (search.tile_flops): the
    MLP's first matmul normalising its 32 rows as it loads them runs the layer norm 96 times over.
    The model's flops against the profiler's count of executed float operations: within 5% for the
    GPT-2-sized block (counting each layer norm once per output, as the model did, gave 13% less),
    and within a factor of two where a prologue reduces the rows in every block."""
    outputs = _block(768, 3072)
    prog = rc.compile(outputs, dims_hint={"B": 32}, cache=False)
    counted = _profiled_flops(prog, _feeds(32, 768, 3072))
    for kernel, flops in zip(prog.kernels, counted):
        assert abs(kernel.cost.flops / flops - 1) < 0.05, (kernel.name, kernel.cost.flops, flops)
    x, w = rc.input("x", ("B", 256)), rc.input("w", (256, 2048))
    prologue = rc.compile({"y": layer_norm(x, (256,), None, None, EPS) @ w}, dims_hint={"B": 32}, cache=False)
    assert "row reduction(s) before the tiles" in prologue.kernels[0].source
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((32, 256)).astype(np.float32),
             "w": rng.standard_normal((256, 2048)).astype(np.float32)}
    (flops,) = _profiled_flops(prologue, feeds)
    assert 0.5 < prologue.kernels[0].cost.flops / flops < 2, (prologue.kernels[0].cost.flops, flops)
