"""The Scatter primitive and index_copy: PyTorch's values on the reference and the emulator, ids refused
alike everywhere, and the in-place write (the kernel writes only the new rows, into the table's buffer,
and a table that is read elsewhere is copied first, so no reader sees it change)."""
import numpy as np
import pytest

import refcomp as rc
from refcomp.errors import FeedError, ShapeError
from refcomp.exec.profile import example_feeds, model_disagreements

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(30)


def _arrays(*shapes):
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


def _torch_index_copy(x, dim, ids, src):
    return (
        torch.from_numpy(x)
        .index_copy(dim, torch.from_numpy(np.asarray(ids)).long(), torch.from_numpy(src))
        .numpy()
    )


@pytest.mark.parametrize("dim", [0, 1, -1, -3])
def test_index_copy_matches_torch_on_the_reference_and_the_emulator(dim):
    shape = (5, 6, 4)
    axis = dim % 3
    ids = np.array([4, 0, 2], np.int32) if axis != 2 else np.array([3, 1, 0], np.int32)
    src_shape = tuple(3 if a == axis else n for a, n in enumerate(shape))
    x, s = _arrays(shape, src_shape)
    x.flat[[0, 7]] = [np.nan, -0.0]
    s.flat[[1, 2]] = [np.inf, -0.0]
    X, S, I = rc.input("x", shape), rc.input("s", src_shape), rc.input("i", (3,), "int32")
    y = X.index_copy(dim, I, S)
    feeds = {"x": x, "s": s, "i": ids}
    want = _torch_index_copy(x, dim, ids, s)
    np.testing.assert_array_equal(rc.evaluate(y, feeds), want)
    np.testing.assert_array_equal(
        rc.compile(y, search=False, cache=False).run(feeds, backend="emulator"), want
    )


def test_index_copy_with_computed_ids_and_a_computed_table():
    x, s = _arrays((7, 3), (3, 3))
    X, S = rc.input("x", (7, 3)), rc.input("s", (3, 3))
    ids = rc.arange(3) * 2 + 1  # 1, 3, 5: float positions the graph computes
    y = (X * 2).index_copy(0, ids, S + 1)
    want = _torch_index_copy(x * 2, 0, [1, 3, 5], s + 1)
    np.testing.assert_array_equal(rc.evaluate(y, {"x": x, "s": s}), want)
    prog = rc.compile(y, cache=False)
    np.testing.assert_array_equal(prog.run({"x": x, "s": s}, backend="emulator"), want)


@pytest.mark.parametrize("ids, words", [([1, 1], "distinct"), ([0, 7], "[0, 7)"), ([-1, 2], "[0, 7)")])
def test_bad_ids_are_a_feed_error_on_every_backend(ids, words):
    X, S, I = rc.input("x", (7, 3)), rc.input("s", ("K", 3)), rc.input("i", ("K",), "int32")
    y = X.index_copy(0, I, S)
    feeds = {"x": _arrays((7, 3))[0], "s": _arrays((2, 3))[0], "i": np.array(ids, np.int32)}
    prog = rc.compile(y, cache=False)
    for run in (lambda: rc.evaluate(y, feeds), lambda: prog.run(feeds, backend="emulator")):
        with pytest.raises(FeedError, match=words.replace("[", r"\[").replace(")", r"\)")) as err:
            run()
        assert "input 'i'" in str(err.value)


def test_computed_ids_are_checked_before_the_kernel_writes():
    X, S = rc.input("x", (4, 2)), rc.input("s", (3, 2))
    for ids, words in (
        (rc.arange(3) * 2, "lie in"),
        (rc.arange(3) * 0.5, "whole numbers"),
        (rc.arange(3) * 0, "distinct"),
    ):
        y = X.index_copy(0, ids, S)
        feeds = {"x": _arrays((4, 2))[0], "s": _arrays((3, 2))[0]}
        for run in (
            lambda: rc.evaluate(y, feeds),
            lambda: rc.compile(y, cache=False).run(feeds, backend="emulator"),
        ):
            with pytest.raises(FeedError, match=words):
                run()


def test_shapes_and_dtypes_torch_refuses_are_refused():
    X = rc.input("x", (4, 3))
    with pytest.raises(ShapeError, match="must have shape"):
        X.index_copy(0, rc.input("i", (2,), "int32"), rc.input("s", (2, 4)))
    with pytest.raises(ShapeError, match="1-D"):
        X.index_copy(0, rc.input("i", (2, 1), "int32"), rc.input("s", (2, 3)))
    with pytest.raises(ShapeError, match="same dtype"):
        X.index_copy(0, rc.input("i", (2,), "int32"), rc.input("s", (2, 3), "float16"))
    with pytest.raises(ShapeError, match="out of range"):
        X.index_copy(2, rc.input("i", (2,), "int32"), rc.input("s", (2, 3)))


def test_the_kernel_writes_the_new_rows_into_the_fed_tables_buffer():
    pool, rows = _arrays((64, 16), (3, 16))
    P, I, R = rc.input("pool", (64, 16)), rc.input("i", ("K",), "int32"), rc.input("r", ("K", 16))
    prog = rc.compile(P.index_copy(0, I, R), cache=False, dims_hint={"K": 3})
    assert [k.kind for k in prog.kernels] == ["scatter"]  # no copy of the pool
    assert prog.kernels[0].cost.bytes < 64 * 16 * 4 / 4  # priced for the rows it moves, not the table
    assert prog.peak_intermediate_bytes({"K": 3}) == 0
    ids = np.array([9, 63, 0], np.int32)
    got = prog.run({"pool": pool, "i": ids, "r": rows}, backend="emulator")
    want = pool.copy()
    want[ids] = rows
    np.testing.assert_array_equal(got, want)


def test_a_table_read_elsewhere_is_copied_so_its_readers_see_the_old_values():
    x, s, t = _arrays((6, 2), (2, 2), (1, 2))
    X, S, T = rc.input("x", (6, 2)), rc.input("s", (2, 2)), rc.input("t", (1, 2))
    I, J = rc.input("i", (2,), "int32"), rc.input("j", (1,), "int32")
    y = X.index_copy(0, I, S)
    z = y.index_copy(0, J, T)  # a chain: z updates y's buffer in place, so y (an output) is copied first
    outs = [y, z, X * 1, (y + 1).sum(0)]
    feeds = {"x": x, "s": s, "t": t, "i": np.array([5, 1], np.int32), "j": np.array([1], np.int32)}
    want = rc.evaluate(outs, feeds)
    y_np = x.copy()
    y_np[[5, 1]] = s
    z_np = y_np.copy()
    z_np[[1]] = t
    for got in (want, rc.compile(outs, search=False, cache=False).run(feeds, backend="emulator"),
                rc.compile(outs, cache=False).run(feeds, backend="emulator")):
        for g, w in zip(got, [y_np, z_np, x, (y_np + 1).sum(0)]):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_the_cost_model_counts_what_the_profiler_counts():
    P, I, R = rc.input("pool", (64, 2, 8)), rc.input("i", ("N",), "int32"), rc.input("r", ("N", 2, 8))
    y = P.index_copy(0, I, R)
    prog = rc.compile([y, y.sum(-1)], cache=False, dims_hint={"N": 5})
    feeds, _ = example_feeds(prog)
    assert model_disagreements(prog, prog.profile(feeds)) == []


def test_a_saved_program_with_a_scatter_loads_and_runs(tmp_path):
    P, I, R = rc.input("pool", (8, 3)), rc.input("i", ("N",), "int32"), rc.input("r", ("N", 3))
    y = P.index_copy(0, I, R) * 2
    prog = rc.compile(y, cache=False)
    prog.save(tmp_path / "p.json")
    loaded = rc.load_program(tmp_path / "p.json")
    feeds = {"pool": _arrays((8, 3))[0], "i": np.array([2, 7], np.int32), "r": _arrays((2, 3))[0]}
    np.testing.assert_array_equal(loaded.run(feeds, backend="emulator"), rc.evaluate(y, feeds))


@pytest.mark.slow
def test_the_scatter_kernel_compiles_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    P, I, R = (
        rc.input("pool", (64, 16), "float16"),
        rc.input("i", ("K",), "int32"),
        rc.input("r", ("K", 16), "float16"),
    )
    prog = rc.compile(P.index_copy(0, I, R) + 0, cache=False)
    assert any(k.kind == "scatter" for k in prog.kernels)
    assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


def test_gathers_of_the_old_table_run_before_the_scatter_overwrites_it():
    """A decode step reads its cache's old pages and writes the new rows into the same pool: the
    Gathers run first and the pool is updated in place, uncopied. A reader that is not a Gather, or
    a Gather that depends on the Scatter, gets a copy instead."""
    from refcomp.ops.graph import toposort
    from refcomp.ops.primitives import make_node
    pool, new = _arrays((12, 2), (2, 2))
    P, T, S, N = (
        rc.input("pool", (12, 2)),
        rc.input("t", ("B", 2), "int32"),
        rc.input("s", ("B",), "int32"),
        rc.input("n", ("B", 2)),
    )
    old = P.reshape((6, 4)).index_select(0, T)  # whole pages of the old pool
    updated = P.index_copy(0, S, N)
    computed_ids = rc.Tensor.from_node(
        make_node("Gather", (P.edge, ((updated[:2, 0] * 0) + rc.arange(2)).edge))
    )
    all_feeds = {
        "pool": pool,
        "t": np.array([[0, 1], [2, 0]], np.int32),
        "s": np.array([1, 4], np.int32),
        "n": new,
    }
    after = pool.copy()
    after[[1, 4]] = new
    cases = [({"old": old, "pool": updated}, False), ({"old": P * 2, "pool": updated}, True),
             ({"late": computed_ids, "pool": updated}, True)]
    for outs, copies in cases:
        used = {n.attrs["name"] for n in toposort([t.node for t in outs.values()]) if n.op.name == "Input"}
        feeds = {k: v for k, v in all_feeds.items() if k in used}
        want = rc.evaluate(outs, feeds)
        np.testing.assert_array_equal(want["pool"], after)
        for search in (False, True):
            prog = rc.compile(outs, search=search, cache=False)
            got = prog.run(feeds, backend="emulator")
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
            scatter = next(k for k in prog.kernels if k.kind == "scatter")
            assert (scatter.output.srcs[0].node.op.name == "Contiguous") == copies, (outs.keys(), search)
