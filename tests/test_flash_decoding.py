"""Flash-decoding: the online-softmax kernel with its keys split across blocks (`splits`) and each block
computing several N tiles (`n_tiles`), softmax_matmul.cu.j2.

Decode attention has one query row a head, so the FlashAttention kernel alone has a block a head. Split,
each of a tile's blocks takes a share of the keys, stores its partial maximum, sum and accumulators
(ws0), and the last to draw a ticket (ws1) combines them in split order. Checked here on paged decode
attention forced through the rules, against the float64 reference on the emulator: splits that leave
some blocks no keys, a head dim of three N tiles, symbolic and fixed key counts, a row whose every key is
masked (NaN, as the reference's softmax); the tickets left at zero for the next launch; the memory
model's counts against the profiler's; nvcc; and the search choosing the kernel for GPT-2's decode step.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.profile import example_feeds, model_disagreements
from refcomp.ops.elementwise import where
from refcomp.ops.tensor import iota
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.search.cost import H200
from refcomp.search.evaluate import Evaluator
from refcomp.serving.kv_cache import gather_pages

from fusion_checks import forced_schedule, launch_split_twice

H, PAGE, PAGES = 2, 4, 9
FORCED = ("matmul", "online_softmax", "stream_scores", "fuse_elementwise", "fuse_gather")


def _paged(d: int, pages="NP"):
    """softmax(q k^T / sqrt(d), masked past each length) @ v, k and v looked up by the block table."""
    q = rc.input("q", ("B", H, 1, d))
    table = rc.input("block_table", ("B", pages), "int32")
    lengths = rc.input("lengths", ("B",))
    pools = (rc.input(f"pool_{n}", (PAGES * PAGE, H, d)) for n in "kv")
    k, v = (gather_pages(pool, table, PAGE, lengths=lengths).permute(0, 2, 1, 3) for pool in pools)
    b, t = q.shape[0], k.shape[2]
    scores = (q @ k.transpose(-2, -1)).reshape((b, H, 1, 1, t)) * (1.0 / math.sqrt(d))
    held = iota((1, t), 1).lt(lengths.reshape((b, 1))).reshape((b, 1, 1, 1, t))
    weights = where(held, scores, -math.inf).softmax(-1)
    return weights.reshape((b, H, 1, t)) @ v


def _program(out, **params):
    """The program with the attention rules applied wherever they partition, and `params` set on the
    online kernel; that kernel."""
    result, sched, _ = forced_schedule(out, FORCED)
    groups = Evaluator(result.graph, result.bindings, H200).partition(sched)
    (root,) = [r for r, g in groups.items() if any(n.id in sched.online for n in g.members)]
    prog = program_for_schedule(out, result, sched.with_params({(root, k): v for k, v in params.items()}))
    (kernel,) = [k for k in prog.kernels if "softmax computed online" in k.source]
    return prog, kernel


def _feeds(rng, b: int, pages: int, d: int, lengths=None):
    t = pages * PAGE
    table = rng.permutation(PAGES)[:pages]  # each row's pages distinct (rolled), so a poisoned key is one
    lengths = rng.integers(1, t + 1, b) if lengths is None else np.array(lengths)
    feeds = {"q": rng.standard_normal((b, H, 1, d)).astype(np.float32),
             "block_table": np.stack([np.roll(table, r) for r in range(b)]).astype(np.int32),
             "lengths": lengths.astype(np.float32),
             "pool_k": (3 * rng.standard_normal((PAGES * PAGE, H, d))).astype(np.float32),
             "pool_v": rng.standard_normal((PAGES * PAGE, H, d)).astype(np.float32)}
    return feeds


@pytest.mark.parametrize("splits,n_tiles,tile,d", [
    (4, 1, 16, 8), (16, 1, 16, 8), (4, 4, 16, 40), (2, 2, 16, 40), (16, 4, 32, 40), (1, 4, 16, 40),
])
def test_split_and_wide_online_kernels_match_the_reference(splits, n_tiles, tile, d):
    prog, kernel = _program(_paged(d), splits=splits, n_tiles=n_tiles, tile=tile)
    assert kernel.launch.splits == splits and kernel.launch.cols == min(n_tiles, -(-d // tile))
    rng = np.random.default_rng(splits * 100 + d)
    for b, pages in ((3, 9), (1, 2), (2, 5)):  # 36, 8 and 20 keys: with 16 splits of 16, most split empty
        feeds = _feeds(rng, b, pages, d)
        poisoned = feeds["block_table"][0, -1]  # its last key: past every row's length
        feeds["pool_k"][poisoned * PAGE + PAGE - 1] = np.nan
        at = [list(row).index(poisoned) * PAGE + PAGE - 1 for row in feeds["block_table"]]
        feeds["lengths"] = np.minimum(feeds["lengths"], at).astype(np.float32)
        got = prog.run(feeds, backend="emulator")
        want = rc.evaluate(_paged(d), feeds, precision="float64")
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, **golden.FLOAT32_TOLERANCE)


def test_a_split_kernel_over_a_fixed_key_count_and_a_fully_masked_row():
    """Three pages (12 keys: the sums are short, not compensated) in 4 splits; the second sequence's
    length 0 masks every key, so its softmax is NaN, as the reference's."""
    prog, kernel = _program(_paged(8, pages=3), splits=4)
    assert "rc_sum_total" not in kernel.source  # a short K: plain sums
    feeds = _feeds(np.random.default_rng(7), 2, 3, 8, lengths=[11, 0])
    got = prog.run(feeds, backend="emulator")
    want = rc.evaluate(_paged(8, pages=3), feeds, precision="float64")
    assert np.isnan(got[1]).all() and np.isnan(want[1]).all()
    np.testing.assert_allclose(got[0], want[0], **golden.FLOAT32_TOLERANCE)


def test_no_keys_attend_to_zeros_as_the_reference_sums_nothing():
    """A table of no pages: the contraction over no keys is 0 (the reference's empty sum), not the
    0 * 1/0 a row's sum of no weights would give."""
    prog, _ = _program(_paged(8), splits=4)
    feeds = _feeds(np.random.default_rng(5), 2, 1, 8)
    feeds["block_table"] = feeds["block_table"][:, :0]
    got = prog.run(feeds, backend="emulator")
    want = rc.evaluate(_paged(8), feeds, precision="float64")
    assert (want == 0).all()
    np.testing.assert_array_equal(got, want)


def launch_twice(be, splits: int, n_tiles: int, seed: int) -> None:
    """The split kernel's program launched twice on backend `be` into the same buffers: after each run
    every ticket is back at 0 (the second run combines again) and the values are the reference's."""
    prog, kernel = _program(_paged(40), splits=splits, n_tiles=n_tiles)
    feeds = _feeds(np.random.default_rng(seed), 3, 9, 40)
    launch_split_twice(be, prog, kernel, feeds, rc.evaluate(_paged(40), feeds, precision="float64"))


def test_the_tickets_return_to_zero_so_the_next_launch_combines_again():
    from refcomp.exec.backends import get_backend

    launch_twice(get_backend("emulator"), splits=4, n_tiles=4, seed=3)


def test_the_partials_and_tickets_stay_inside_their_buffers_under_the_sanitizer():
    from refcomp.exec.emulator import EmulatorBackend

    launch_twice(EmulatorBackend(sanitize=True), splits=4, n_tiles=4, seed=2)  # every access bounds-checked


@pytest.mark.parametrize("splits,n_tiles,tile", [(4, 1, 16), (4, 4, 16), (3, 2, 32)])
def test_split_kernels_agree_with_the_profiler_and_build_with_nvcc(splits, n_tiles, tile):
    from refcomp.exec.nvcc import nvcc_available, nvcc_check

    prog, kernel = _program(_paged(40), splits=splits, n_tiles=n_tiles, tile=tile)
    feeds, _ = example_feeds(prog)
    assert model_disagreements(prog, prog.profile(feeds)) == []
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


@pytest.mark.parametrize("batch", [1, 32])
def test_gpt2_decode_attention_is_one_online_kernel_a_layer(batch):
    """GPT-2 small's decode step (one layer, context 1,024): the search makes the attention one online
    kernel, with its keys split across blocks at batch 1 (12 heads: 12 blocks unsplit)."""
    from refcomp.serving.kv_cache import PagedKVPool
    from refcomp.serving.models import random_gpt2
    from refcomp.serving.programs import step_graph
    from refcomp.serving.sampling import greedy_graph

    model = random_gpt2(1, 768, 12, 50257, 1024)
    pool = PagedKVPool(batch * 64, 16, 1, 12, 64)
    prog = rc.compile(step_graph(model, pool, 1, greedy_graph), dims_hint={"B": batch, "NP": 64}, cache=False)
    (online,) = [k for k in prog.kernels if "softmax computed online" in k.source]
    assert "scores streamed" in online.source
    if batch == 32:  # the head's 64 value columns in one block: K streamed once a head
        assert online.launch.cols * online.launch.block >= 64
    else:  # 12 heads: the keys split across blocks
        assert online.launch.splits > 1


def test_a_saved_split_program_loads_split_and_runs_alike(tmp_path):
    """A saved program keeps the kernel's parameters, so loaded it launches the split kernel again and
    gives the same values (the serving engine's programs come from the program cache)."""
    from refcomp.pipeline.load import load_program

    out = _paged(40)
    prog, kernel = _program(out, splits=4, n_tiles=4)
    prog.save(tmp_path / "split.json")
    loaded = load_program(tmp_path / "split.json", out)
    (again,) = [k for k in loaded.kernels if "softmax computed online" in k.source]
    assert again.launch == kernel.launch and again.source == kernel.source
    feeds = _feeds(np.random.default_rng(6), 2, 5, 40)
    np.testing.assert_array_equal(loaded.run(feeds, backend="emulator"), prog.run(feeds, backend="emulator"))
