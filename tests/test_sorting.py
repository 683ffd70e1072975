"""sort, argsort, topk, kthvalue and median against PyTorch on the CPU: random values with ties,
+-inf, NaN and +-0, lengths that are not powers of two, both algorithms (the tournament and the
network), on the reference and on the emulator; and the graph's size, which must grow with log² of
the length, or with its log, never with the length."""
import numpy as np
import pytest

import refcomp as rc
from refcomp.errors import ShapeError
from refcomp.ops.graph import toposort
from refcomp.ops.sorting import MAX_COUNTED, counted
from refcomp.ops.tournament import MAX_CANDIDATES, sizes
from api_helpers import needs_torch, torch

pytestmark = needs_torch


def values(rng, shape, ties=True):
    """Normal values, rounded to halves when `ties` (so many repeat), with NaN, +-inf and +-0 spread in."""
    x = rng.standard_normal(shape).astype(np.float32)
    if ties:
        x = np.round(x * 2) / 2
    flat = x.reshape(-1)
    special = [np.nan, np.inf, -np.inf, np.nan, -0.0, 0.0, np.inf]
    picks = rng.choice(flat.size, size=min(flat.size, len(special)), replace=False)
    flat[picks] = special[:len(picks)]
    return x


def same(got, want):
    """Equal elementwise, NaN where NaN, and the sign of each zero too."""
    want = np.asarray(want, dtype=np.float32)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def stable(x, dim, descending):
    values, indices = torch.sort(torch.from_numpy(x), dim=dim, descending=descending, stable=True)
    return values.numpy(), indices.numpy().astype(np.float32)


def nodes(*tensors) -> int:
    return len(toposort([t.node for t in tensors]))


@pytest.mark.parametrize("shape,dim", [((1,), 0), ((2, 2), 1), ((3, 7), -1), ((2, 17), 1), ((2, 33), -1),
                                       ((5, 4, 6), 1), ((12, 3), 0), ((2, 100), 1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_torchs_stable_sort(rng, shape, dim, descending):
    x = values(rng, shape)
    a = rc.input("x", shape)
    got_values, got_indices = rc.evaluate(
        list(a.sort(dim, descending=descending)) + [a.argsort(dim, descending)], {"x": x}
    )[:2]
    want_values, want_indices = stable(x, dim, descending)
    same(got_values, want_values)
    same(got_indices, want_indices)
    # PyTorch's default (unstable) sort gives the same values; its order of ties (-0.0 and 0.0) is its own
    np.testing.assert_array_equal(
        got_values, torch.sort(torch.from_numpy(x), dim=dim, descending=descending).values
    )


@pytest.mark.parametrize("n,k", [(9, 1), (9, 4), (65, 5), (40, 40), (200, 3), (200, 70), (257, 64), (1030, 7),
                                 (300, 70), (520, 100)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_by_counting_and_by_the_network(rng, n, k, largest):
    """Values are PyTorch's; ties come in input order (PyTorch's order of ties is unspecified), so the
    indices are those of the stable sort, and PyTorch's own where no two values tie."""
    x = values(rng, (3, n))
    a = rc.input("x", (3, n))
    got_values, got_indices = rc.evaluate(list(a.topk(k, -1, largest)), {"x": x})
    np.testing.assert_array_equal(got_values, torch.topk(torch.from_numpy(x), k, -1, largest).values)
    want_values, want_indices = stable(x, -1, largest)
    same(got_values, want_values[:, :k])
    same(got_indices, want_indices[:, :k])
    distinct = rng.permutation(3 * n).reshape(3, n).astype(np.float32)
    got_indices = rc.evaluate([a.topk(k, -1, largest)[1]], {"x": distinct})[0]
    same(got_indices, torch.topk(torch.from_numpy(distinct), k, -1, largest).indices.numpy())


def test_topk_picks_both_algorithms():
    assert (
        counted(8, 50257, 50) and len(sizes(50257)) == 5
    )  # topk(50) of a GPT-2 vocabulary: 4 levels of minima
    assert counted(3, 200, 70) and counted(3, 257, 64) and counted(3, 1030, 7)  # the tournament, above
    assert 70 > MAX_COUNTED and 300 > MAX_CANDIDATES and not counted(3, 300, 70)  # the network, above
    assert not counted(400, 50257, 50) and not counted("B", 65, 5)  # positions past 2^24, or an unknown batch


@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_long_rows_with_ties_on_the_emulator(rng, largest):
    """topk(50) and topk(7) of rows of 5,000 (three levels of minima) with many ties, NaN, +-inf and
    +-0 (a run of NaN in one row; the other NaN but for 30 +inf and 10 -0.0): PyTorch's values, the
    stable order's indices, on the reference and on the emulator, bit for bit."""
    x = values(rng, (2, 5000))
    x[0, 100:180] = np.nan
    x[1] = np.nan
    x[1, 4000:4030] = np.inf
    x[1, 10:20] = -0.0
    a = rc.input("x", (2, 5000))
    outputs = list(a.topk(50, -1, largest)) + list(a.topk(7, -1, not largest))
    want = rc.evaluate(outputs, {"x": x})
    for got, k, descending in ((want[:2], 50, largest), (want[2:], 7, not largest)):
        want_values, want_indices = stable(x, -1, descending)
        same(got[0], want_values[:, :k])
        same(got[1], want_indices[:, :k])
    np.testing.assert_array_equal(want[0], torch.topk(torch.from_numpy(x), 50, -1, largest).values)
    for got, expected in zip(rc.compile(outputs).run({"x": x}, backend="emulator"), want):
        same(got, expected)


@pytest.mark.parametrize(
    "shape,dim,k", [((4, 9), 1, 1), ((4, 9), 1, 5), ((4, 9), 0, 2), ((3, 70), -1, 66), ((2, 300), 1, 150)]
)
def test_kthvalue(rng, shape, dim, k):
    x = values(rng, shape)
    a = rc.input("x", shape)
    got_values, got_indices = rc.evaluate(list(a.kthvalue(k, dim)), {"x": x})
    np.testing.assert_array_equal(got_values, torch.kthvalue(torch.from_numpy(x), k, dim).values)
    want_values, want_indices = stable(x, dim, False)
    same(got_values, np.take(want_values, k - 1, axis=dim))
    same(got_indices, np.take(want_indices, k - 1, axis=dim))
    kept = rc.evaluate(list(a.kthvalue(k, dim, keepdim=True)), {"x": x})
    assert kept[0].shape == tuple(1 if i == dim % len(shape) else n for i, n in enumerate(shape))


@pytest.mark.parametrize("shape,dim", [((5, 8), 1), ((5, 9), 1), ((6, 3), 0), ((2, 101), -1)])
def test_median_is_the_lower_median_and_nan_wins(rng, shape, dim):
    """Rows without NaN: the lower median (indices compared where no two values tie); rows with a
    NaN: NaN and the index of the first NaN, as PyTorch."""
    x = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)
    x[(0,) * len(shape)] = np.nan  # the first row (or column) holds a NaN
    x[tuple([1] + [2] * (len(shape) - 1))] = np.nan
    a = rc.input("x", shape)
    got_values, got_indices = rc.evaluate(list(a.median(dim)), {"x": x})
    want = torch.median(torch.from_numpy(x), dim)
    same(got_values, want.values.numpy())
    same(got_indices, want.indices.numpy())
    ties = values(rng, shape)  # (which of several zeros PyTorch returns is its own: signs are not compared)
    got = rc.evaluate([a.median(), a.median(dim)[0]], {"x": ties})
    np.testing.assert_array_equal(got[0], torch.median(torch.from_numpy(ties)))
    np.testing.assert_array_equal(got[1], torch.median(torch.from_numpy(ties), dim).values)
    ties[np.isnan(ties)] = 1.5
    np.testing.assert_array_equal(
        rc.evaluate([a.median()], {"x": ties})[0], torch.median(torch.from_numpy(ties))
    )


def test_scalars_empty_axes_dtypes_and_symbolic_batches(rng):
    s = rc.input("s", ())
    got = rc.evaluate(
        list(s.sort()) + list(s.topk(1)) + list(s.kthvalue(1)) + [s.median()], {"s": np.float32(5)}
    )
    assert [g.shape for g in got] == [()] * 7 and [float(g) for g in got] == [5, 0, 5, 0, 5, 0, 5]
    e = rc.input("e", (3, 0))
    got = rc.evaluate(list(e.sort(-1)) + list(e.topk(0)), {"e": np.zeros((3, 0), np.float32)})
    assert [g.shape for g in got] == [(3, 0)] * 4
    assert np.isnan(rc.evaluate([e.median()], {})[0])
    h = rc.input("h", (2, 9), "float16")
    values_, indices = h.sort(descending=True)
    assert (values_.dtype, indices.dtype) == ("float16", "float32")
    b = rc.input("b", ("B", 5, 6))
    x = values(rng, (3, 5, 6))
    got_values, got_indices = rc.evaluate(list(b.sort(1)), {"b": x})
    want_values, want_indices = stable(x, 1, False)
    same(got_values, want_values)
    same(got_indices, want_indices)


def test_errors():
    with pytest.raises(ShapeError, match="k = 10"):
        rc.input("x", (4, 9)).topk(10)
    with pytest.raises(ShapeError, match="k = 0"):
        rc.input("x", (4, 9)).kthvalue(0)
    with pytest.raises(ShapeError, match="symbolic length"):
        rc.input("x", ("B", 9)).sort(0)
    with pytest.raises(ShapeError, match="symbolic length"):
        rc.input("x", ("B", 9)).median(0)
    with pytest.raises(ShapeError, match="more than the 2\\^22"):
        rc.input("x", (3, 5_000_000)).sort()
    with pytest.raises(ShapeError, match="is empty"):
        rc.input("x", (2, 0)).median(1)


def test_the_graph_grows_with_log_squared_n_or_with_log_n():
    sort = {n: nodes(*rc.input("x", (n,)).sort()) for n in (1024, 4096, 8192)}
    assert sort[4096] <= 400  # 78 stages of 4 nodes, 12 re-signings and the keys (was 17,871)
    assert sort[8192] - sort[4096] == 4 * 13 + 1  # one more merge: 13 stages and its re-signing
    top = {n: nodes(*rc.input("x", (8, n)).topk(50)) for n in (20000, 50257, 201028)}
    assert top[50257] <= 500  # 4 levels (topk(5) of 65 was 6,431 nodes; 50 rounds of row maxima, 714)
    assert top[20000] == top[50257]  # as many levels: the row's length does not count
    assert top[201028] - top[50257] <= 100  # one more level
    assert nodes(*rc.input("x", (8, 50257)).topk(64)) == top[50257]  # nor does k
    assert (
        nodes(*rc.input("x", (8, 50257)).topk(100)) <= 4 * (36 + 9 * 8) + 60
    )  # the network: 36 + 9 x 8 stages


@pytest.mark.parametrize("shape,build", [
    ((13, 13), lambda a: list(a.sort(-1, descending=True))),
    ((13, 13), lambda a: list(a.topk(3, largest=False))),
    ((13, 13), lambda a: list(a.median(-1)) + list(a.kthvalue(11, 0))),
    ((3, 300), lambda a: list(a.sort(-1)) + list(a.topk(70))),  # the network
    ((3, 300), lambda a: list(a.topk(9, largest=False)) + list(a.median(0))),  # a level of minima
])
def test_emulator_agrees_with_the_reference(rng, shape, build):
    """The compiled tournament and network, fused as the search likes, give the reference's bits."""
    x = values(rng, shape)
    a = rc.input("x", shape)
    outputs = build(a)
    got = rc.compile(outputs).run({"x": x}, backend="emulator")
    for g, want in zip(got, rc.evaluate(outputs, {"x": x})):
        same(g, want)
