"""The reference interpreter's fast paths agree with its definitions: a view read as a strided window
equals gathering every index, and a SumReduce chain over a Mul evaluated as one einsum equals node
by node evaluation (float64: to 1e-12; float32: within rounding) on designed graphs and fuzz graphs."""
import numpy as np
import pytest

import refcomp as rc
from refcomp import fuzz
from refcomp.reference.reference import _apply_view_by_index, apply_view
from refcomp.symbolic.view import View


@pytest.mark.parametrize("seed", range(40))
def test_a_view_read_in_place_equals_gathering_its_indices(seed):
    rng = np.random.default_rng(seed)
    flat = rng.standard_normal(200).astype(np.float32)
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(n) for n in rng.integers(1, 5, ndim))
    strides = tuple(int(s) for s in rng.integers(-3, 4, ndim))
    offset = sum(max(-s, 0) * (n - 1) for s, n in zip(strides, shape)) + int(rng.integers(0, 10))
    view = View(shape, strides, offset)
    if rng.random() < 0.5:  # a mask: a range per axis, possibly empty
        ranges = [(int(rng.integers(0, n + 1)), int(rng.integers(0, n + 1))) for n in shape]
        view = view.with_mask([(lo, max(lo, hi)) for lo, hi in ranges])
    np.testing.assert_array_equal(apply_view(flat, view, {}), _apply_view_by_index(flat, view, {}))


def _graphs():
    x, w = rc.input("x", ("B", 3, 9, 9)), rc.input("w", (4, 3, 3, 3))
    yield rc.nn.conv2d(x, w, padding=1, stride=2).relu().sum((2, 3)), {"x": (2, 3, 9, 9), "w": (4, 3, 3, 3)}
    a, b = rc.input("a", ("B", 5, 7)), rc.input("b", (7, 6))
    yield (a @ b).softmax(-1) @ rc.input("c", (6, 2)), {"a": (2, 5, 7), "b": (7, 6), "c": (6, 2)}
    s = rc.input("s", (4, 6))
    yield (s * 2.0).sum(), {"s": (4, 6)}  # a literal operand: broadcast along every axis
    yield rc.input("v", (3,)).reshape((3, 1)).broadcast_to((3, 5)).sum(1) * 1.0, {"v": (3,)}


@pytest.mark.parametrize("precision,rtol", [("float64", 1e-12), ("float32", 1e-5)])
def test_contractions_equal_node_by_node_evaluation(precision, rtol):
    rng = np.random.default_rng(0)
    for out, shapes in _graphs():
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        fast = rc.evaluate(out, feeds, precision=precision)
        slow = rc.evaluate(out, feeds, precision=precision, contract=False)
        np.testing.assert_allclose(fast, slow, rtol=rtol, atol=rtol)


def test_contractions_on_fuzz_graphs():
    for index in range(60):
        graph = fuzz.generate(3, index)
        outputs = graph.build("")
        feeds = graph.feeds("", {"B": 2, "T": 3}, 0)
        try:
            slow = rc.evaluate(outputs, feeds, dims={"B": 2, "T": 3}, precision="float64", contract=False)
        except rc.RefcompError:
            continue
        fast = rc.evaluate(outputs, feeds, dims={"B": 2, "T": 3}, precision="float64")
        for name in slow:
            np.testing.assert_allclose(fast[name], slow[name], rtol=1e-9, atol=1e-9, equal_nan=True)
