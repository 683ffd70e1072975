"""The online softmax over decode-shaped attention (codegen/online.py `_statistics_rows`,
`squeezed_index`): one query per head, the scores and their softmax kept as (B, H, 1, 1, T) while the
value contraction reads the weights as (B, H, 1, T) (serving's paged attention groups the query heads
sharing a K/V head into its rows). Such a reshape only adds or drops axes of extent 1 and moves no
element, so the rules `online_softmax` and `stream_scores` apply: the designed graphs below, plain and
over the paged KV cache (K and V looked up by the block table inside the kernel, positions past each
sequence's length selected away), forced through the rules, against the float64 reference; and a
reshape that merges real axes, refused.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy

import refcomp as rc
from refcomp import golden
from refcomp.codegen.online import squeezed_index
from refcomp.exec.profile import example_feeds, model_disagreements
from refcomp.ops.elementwise import where
from refcomp.ops.tensor import iota
from refcomp.serving.kv_cache import PagedKVPool, gather_pages
from refcomp.serving.models import random_gpt2
from refcomp.serving.programs import step_graph

from fusion_checks import forced

H, D, PAGE, PAGES = 2, 8, 4, 9


def _decode_attention(q, k, v, lengths):
    """softmax(q k^T / sqrt(D), masked to each sequence's length) @ v for q (B, H, 1, D), k and v
    (B, H, T, D): the scores as (B, H, 1, 1, T), the contraction over (B, H, 1, T)."""
    b, t = q.shape[0], k.shape[2]
    scores = (q @ k.transpose(-2, -1)).reshape((b, H, 1, 1, t)) * (1.0 / math.sqrt(D))
    held = iota((1, t), 1).lt(lengths.reshape((b, 1))).reshape((b, 1, 1, 1, t))
    weights = where(held, scores, -math.inf).softmax(-1)
    return weights.reshape((b, H, 1, t)) @ v


def _plain():
    q = rc.input("q", ("B", H, 1, D))
    k, v = (rc.input(n, ("B", H, "T", D)) for n in "kv")
    return _decode_attention(q, k, v, rc.input("lengths", ("B",)))


def _paged():
    q = rc.input("q", ("B", H, 1, D))
    table = rc.input("block_table", ("B", "NP"), "int32")
    lengths = rc.input("lengths", ("B",))
    pools = (rc.input(f"pool_{n}", (PAGES * PAGE, H, D)) for n in "kv")
    k, v = (gather_pages(pool, table, PAGE, lengths=lengths).permute(0, 2, 1, 3) for pool in pools)
    return _decode_attention(q, k, v, lengths)


def _check(prog, out, feeds):
    got = prog.run(feeds, backend="emulator")
    want = rc.evaluate(out, feeds, precision="float64")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, **golden.FLOAT32_TOLERANCE)


@pytest.mark.parametrize("streamed", [True, False])
def test_decode_attention_with_unit_axes_is_online(streamed):
    out = _plain()
    names = ["matmul", "online_softmax"] + (["stream_scores"] if streamed else []) + ["fuse_elementwise"]
    prog, applied = forced(out, names)
    assert set(names) <= applied, applied
    online = [k for k in prog.kernels if "softmax computed online" in k.source]
    assert len(online) == 1 and ("scores streamed" in online[0].source) == streamed
    rng = np.random.default_rng(1)
    for b, t in ((3, 37), (1, 5)):
        feeds = {"q": rng.standard_normal((b, H, 1, D)).astype(np.float32),
                 "k": (3 * rng.standard_normal((b, H, t, D))).astype(np.float32),
                 "v": rng.standard_normal((b, H, t, D)).astype(np.float32),
                 "lengths": rng.integers(1, t + 1, b).astype(np.float32)}
        feeds["k"][0, :, t - 1] = np.nan  # past the first sequence's length when it is shorter: selected away
        feeds["lengths"][0] = min(feeds["lengths"][0], t - 1)
        _check(prog, out, feeds)


def test_paged_decode_attention_streams_the_looked_up_pages():
    out = _paged()
    rules = ["fuse_gather", "matmul", "online_softmax", "stream_scores", "fuse_elementwise"]
    prog, applied = forced(out, rules)
    assert {"fuse_gather", "online_softmax", "stream_scores"} <= applied, applied
    online = [k for k in prog.kernels if "scores streamed" in k.source]
    assert len(online) == 1 and sum(n.op.name == "Gather" for n in online[0].nodes) == 2
    assert len(prog.kernels) == 1
    rng = np.random.default_rng(2)
    b, pages, np_ = 3, PAGES, 3
    for lengths in ((12, 5, 1), (9, 12, 4)):
        feeds = {"q": rng.standard_normal((b, H, 1, D)).astype(np.float32),
                 "pool_k": (2 * rng.standard_normal((pages * PAGE, H, D))).astype(np.float32),
                 "pool_v": rng.standard_normal((pages * PAGE, H, D)).astype(np.float32),
                 "block_table": rng.permutation(pages)[:b * np_].reshape(b, np_).astype(np.int32),
                 "lengths": np.array(lengths, np.float32)}
        for s, n in enumerate(lengths):  # poison past each sequence's end: never reaches its output
            for pos in range(n, np_ * PAGE):
                slot = feeds["block_table"][s, pos // PAGE] * PAGE + pos % PAGE
                feeds["pool_k"][slot], feeds["pool_v"][slot] = np.nan, np.inf
        _check(prog, out, feeds)


def test_a_reshape_that_merges_rows_is_not_online():
    """Rows (B, H) merged into B * H are not the softmax's rows axis by axis: refused."""
    q = rc.input("q", ("B", H, 3, D))
    k, v = (rc.input(n, ("B", H, 5, D)) for n in "kv")
    weights = (q @ k.transpose(-2, -1)).softmax(-1)  # (B, H, 3, 5)
    out = weights.reshape(("B", H * 3, 5)) @ v.reshape(("B", H * 5, D))[:, :5]
    _, applied = forced(out, ["matmul", "online_softmax", "fuse_elementwise"])
    assert "online_softmax" not in applied


def test_squeezed_index_moves_no_element():
    i, j = sympy.symbols("i j")
    assert squeezed_index([i, j], ["B", 7], ["B", 1, 1, 7]) == [i, 0, 0, j]
    assert squeezed_index([i, 0, 0, j], ["B", 1, 1, 7], ["B", 7]) == [i, j]
    assert squeezed_index([i, j], ["B", 7], [7, "B"]) is None
    assert squeezed_index([i, j], [2, 7], [14]) is None


def _step(chunk):
    model = random_gpt2(layers=2, d_model=32, heads=4, vocab=64, positions=64)
    pool = PagedKVPool(16, PAGE, 2, 4, 8)
    hint = {"B": 2, "NP": 3, **({} if chunk == 1 else {"C": 8})}
    return rc.compile(step_graph(model, pool, chunk), dims_hint=hint, cache=False)


def test_serving_prefill_and_decode_attend_in_one_flash_kernel_a_layer():
    """Attention over the pages is one kernel a layer (scores streamed, pages looked up in it), in
    prefill and in decode (whose keys a long context splits across blocks: tests/test_flash_decoding.py;
    here 12 keys are one tile)."""
    for prog in (_step("C"), _step(1)):
        streamed = [k for k in prog.kernels if "scores streamed" in k.source]
        assert len(streamed) == 2 and all(any(n.op.name == "Gather" for n in k.nodes) for k in streamed)
        feeds, _ = example_feeds(prog)
        assert model_disagreements(prog, prog.profile(feeds)) == []


def test_the_online_decode_kernels_agree_with_the_profiler_and_compile_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    programs = [forced(_plain(), ["matmul", "online_softmax", "stream_scores", "fuse_elementwise"])[0],
                forced(_paged(), ["fuse_gather", "matmul", "online_softmax", "stream_scores",
                                   "fuse_elementwise"])[0], _step("C")]
    for prog in programs[:2]:
        feeds, _ = example_feeds(prog)
        assert model_disagreements(prog, prog.profile(feeds)) == []
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    for prog in programs:
        assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}
