"""fuse_gather (search/fusion_rules.py, codegen/emit.py `looked_up`): a Gather read by an elementwise,
reduce or matmul kernel is looked up inside it, table[ids[i] * row + j] under the gather kernel's id
guard, instead of copied out by a kernel of its own. Checked against NumPy written directly, with ids
refused alike on every backend, the guard itself under AddressSanitizer, a table a Scatter overwrites
left to its gather kernel, the memory model against the profiler, and nvcc."""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc
from refcomp.errors import FeedError
from refcomp.exec.profile import example_feeds, model_disagreements
from refcomp.serving.kv_cache import gather_pages, write_slots

RNG = np.random.default_rng(7)


def _embedding_graph():
    table, ids, x = rc.input("table", (50, 8)), rc.input("ids", ("N",), "int32"), rc.input("x", ("N", 8))
    rows = table.index_select(0, ids)
    return [(rows * 2.0 + x).exp(), rows.sum(-1), rows @ rc.input("w", (8, 3))]


def _embedding_feeds(ids):
    n = len(ids)
    return {"table": RNG.standard_normal((50, 8)).astype(np.float32), "ids": np.asarray(ids, np.int32),
            "x": RNG.standard_normal((n, 8)).astype(np.float32),
            "w": RNG.standard_normal((8, 3)).astype(np.float32)}


def test_a_gather_is_looked_up_inside_each_kernel_that_reads_it():
    prog = rc.compile(_embedding_graph(), cache=False, dims_hint={"N": 7})
    assert "fuse_gather" in {s.rule for s in prog.search.trace}
    assert not any(k.kind == "gather" for k in prog.kernels)
    readers = [k for k in prog.kernels if any(n.op.name == "Gather" for n in k.nodes)]
    assert len(readers) == len(prog.kernels) == 3
    for k in readers:  # every lookup guarded as the gather kernel guards it
        assert "< 50) ?" in k.source and ">= 0 &&" in k.source, k.source
    feeds = _embedding_feeds([3, 0, 49, 7, 7, 12, 31])
    rows = feeds["table"][feeds["ids"]]
    want = [np.exp(rows * 2 + feeds["x"]), rows.sum(-1), rows @ feeds["w"]]
    for got in (prog.run(feeds, backend="emulator"), rc.evaluate(_embedding_graph(), feeds)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [50, -1])
def test_ids_outside_the_table_are_refused_on_every_backend(bad):
    graph = _embedding_graph()
    prog = rc.compile(graph, cache=False, dims_hint={"N": 3})
    feeds = _embedding_feeds([1, bad, 2])
    for run in (lambda: rc.evaluate(graph, feeds), lambda: prog.run(feeds, backend="emulator")):
        with pytest.raises(FeedError, match=r"ids from input 'ids' must lie in \[0, 50\)"):
            run()


def test_the_lookup_guard_keeps_a_kernel_inside_the_table_under_asan(monkeypatch):
    """The runner refuses such ids before any launch; past it (the check switched off here), the
    kernel's own guard reads 0 for them, and AddressSanitizer sees no access outside a buffer."""
    from refcomp.exec import backends, program
    from refcomp.exec.emulator import EmulatorBackend
    graph = _embedding_graph()[:2]
    prog = rc.compile(graph, cache=False, dims_hint={"N": 4})
    sanitized = EmulatorBackend(sanitize=True)
    monkeypatch.setattr(backends, "_instance", lambda name: sanitized)
    monkeypatch.setattr(program, "check_ids", lambda *args: None)
    feeds = _embedding_feeds([2, 1 << 20, -(1 << 20), 5])
    del feeds["w"]
    exp, sums = prog.run(feeds, backend="emulator")
    rows = feeds["table"][[2, 0, 0, 5]] * np.array([1, 0, 0, 1], np.float32)[:, None]
    np.testing.assert_allclose(exp, np.exp(rows * 2 + feeds["x"]), rtol=1e-5)
    np.testing.assert_allclose(sums, rows.sum(-1), rtol=1e-5, atol=1e-6)


def test_a_gather_of_a_table_a_scatter_overwrites_keeps_its_kernel():
    """A decode step that reads its cache's old pages must read them before the Scatter writes the pool
    in place: that Gather stays a kernel of its own (ordered before the write), uncopied; the Gather of
    the written pool is looked up where it is read."""
    pool = RNG.standard_normal((12, 2)).astype(np.float32)
    P, T, S, N = (rc.input("pool", (12, 2)), rc.input("t", ("B", 2), "int32"), rc.input("s", ("B",), "int32"),
                  rc.input("n", ("B", 2)))
    updated = P.index_copy(0, S, N)
    old = P.reshape((6, 4)).index_select(0, T).sum(-1) * 2.0
    new = updated.reshape((6, 4)).index_select(0, T).sum(-1) * 3.0
    feeds = {"pool": pool, "t": np.array([[0, 1], [2, 0]], np.int32), "s": np.array([1, 4], np.int32),
             "n": RNG.standard_normal((2, 2)).astype(np.float32)}
    after = pool.copy()
    after[[1, 4]] = feeds["n"]
    prog = rc.compile([old, new, updated], cache=False, dims_hint={"B": 2})
    kinds = [k.kind for k in prog.kernels]
    assert kinds.count("gather") == 1 and kinds.index("gather") < kinds.index("scatter"), kinds
    got = prog.run(feeds, backend="emulator")
    np.testing.assert_allclose(got[0], pool.reshape(6, 4)[feeds["t"]].sum(-1) * 2, rtol=1e-6)
    np.testing.assert_allclose(got[1], after.reshape(6, 4)[feeds["t"]].sum(-1) * 3, rtol=1e-6)
    np.testing.assert_allclose(got[2], after)


def _paged_attention(pages=6, size=4, heads=2, dim=8):
    """One decode step of attention over a paged pool: the new row written at its slot, then q's
    softmax over the sequence's pages (read from the written pool) weighting them."""
    pool = rc.input("pool", (pages * size, heads, dim))
    table, slots = rc.input("table", ("B", "P"), "int32"), rc.input("slots", ("B",), "int32")
    new, q = rc.input("new", ("B", heads, dim)), rc.input("q", ("B", heads, dim))
    written = write_slots(pool, slots, new)
    keys = gather_pages(written, table, size)  # (B, P * size, heads, dim)
    scores = (q.unsqueeze(1) * keys).sum(-1) * (1 / math.sqrt(dim))
    return (scores.softmax(1).unsqueeze(-1) * keys).sum(1), written


def _paged_feeds(batch=2, width=3, pages=6, size=4, heads=2, dim=8):
    table = np.array([[5, 0, 2], [1, 3, 4]], np.int32)[:batch, :width]
    return {"pool": RNG.standard_normal((pages * size, heads, dim)).astype(np.float32), "table": table,
            "slots": np.array([2, 13], np.int32)[:batch],
            "new": RNG.standard_normal((batch, heads, dim)).astype(np.float32),
            "q": RNG.standard_normal((batch, heads, dim)).astype(np.float32)}


def test_paged_attention_reads_the_written_pool_without_copying_its_pages():
    out, written = _paged_attention()
    prog = rc.compile([out, written], cache=False, dims_hint={"B": 2, "P": 3})
    assert [k.kind for k in prog.kernels].count("gather") == 0
    feeds = _paged_feeds()
    pool = feeds["pool"].copy()
    pool[feeds["slots"]] = feeds["new"]
    keys = pool.reshape(6, 4, 2, 8)[feeds["table"]].reshape(2, 12, 2, 8)
    scores = np.einsum("bhd,blhd->blh", feeds["q"], keys) / math.sqrt(8)
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    got = prog.run(feeds, backend="emulator")
    np.testing.assert_allclose(got[0], np.einsum("blh,blhd->bhd", weights, keys), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], pool)


def test_the_memory_model_counts_the_lookups_the_profiler_counts():
    """Requests agree exactly; sectors of a lookup follow the ids (data), as a gather kernel's do."""
    for graph, hint in ((_embedding_graph(), {"N": 5}), (list(_paged_attention()), {"B": 2, "P": 3})):
        prog = rc.compile(graph, cache=False, dims_hint=hint)
        feeds, _ = example_feeds(prog)
        assert model_disagreements(prog, prog.profile(feeds)) == []


@pytest.mark.slow
def test_the_fused_lookups_compile_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    for graph, hint in ((_embedding_graph(), {"N": 5}), (list(_paged_attention()), {"B": 2, "P": 3})):
        prog = rc.compile(graph, cache=False, dims_hint=hint)
        assert any(n.op.name == "Gather" for k in prog.kernels for n in k.nodes if k.kind != "gather")
        assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}
