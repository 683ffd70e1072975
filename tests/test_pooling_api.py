"""Pools with PyTorch's arguments (dilation, ceil_mode, count_include_pad, divisor_override,
return_indices), max_unpool, and Tensor.gather: each against PyTorch on the CPU, on the reference and
(a selection) on the emulator; ONNX's MaxPool Indices output against onnx.reference."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from api_helpers import close, exact, needs_torch, torch

pytestmark = needs_torch
F = torch.nn.functional if torch is not None else None


def _input(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[3] = np.nan  # NaN counts as the maximum, and its index is the one returned
    flat[10:14] = 1.5  # ties: the first in window order wins
    flat[20] = -np.inf
    return x


def _both(fn, feeds):
    """The reference's and the emulator's (searched program's) results of fn(inputs)."""
    inputs = {
        k: rc.input(k, v.shape, "int32" if v.dtype.kind in "iu" else "float32") for k, v in feeds.items()
    }
    outputs = fn(**inputs)
    outputs = dict(enumerate(outputs)) if isinstance(outputs, tuple) else {0: outputs}
    return rc.evaluate(outputs, feeds), rc.compile(outputs, cache=False).run(feeds, backend="emulator")


MAX_POOLS = [  # (d, kernel, stride, padding, dilation, ceil_mode)
    (1, 3, 2, 1, 1, True),
    (1, 2, 1, 0, 3, False),
    (2, 3, 2, 1, 1, True),
    (2, 2, 2, 0, 2, False),
    (2, (3, 2), (2, 3), (1, 0), (1, 2), True),
    (2, 3, 1, 1, 1, False),
    (3, 2, 2, 0, 1, True),
    (3, (3, 1, 2), 1, (1, 0, 1), (1, 1, 2), False),
]


@pytest.mark.parametrize("d, kernel, stride, padding, dilation, ceil_mode", MAX_POOLS)
def test_max_pool_with_indices_matches_torch(rng, d, kernel, stride, padding, dilation, ceil_mode):
    x = _input(rng, (2, 3) + (9, 10, 7)[:d])
    pool = getattr(rc.nn, f"max_pool{d}d")
    ref, emu = _both(
        lambda x: pool(x, kernel, stride, padding, dilation, ceil_mode, return_indices=True), {"x": x}
    )
    values, indices = getattr(F, f"max_pool{d}d")(
        torch.from_numpy(x), kernel, stride, padding, dilation, ceil_mode, return_indices=True
    )
    for got in (ref, emu):
        close(got[0], values.numpy())
        exact(got[1], indices.numpy().astype(np.float32))  # indices are exact float32 positions


AVG_POOLS = [  # (d, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    (1, 3, 2, 1, True, True, None), (1, 4, 3, 2, True, False, None),
    (2, 3, 2, 1, True, True, None), (2, 3, 2, 1, True, False, None), (2, 2, 3, 1, True, True, None),
    (2, 3, 2, 0, False, True, 5), (2, (3, 2), (2, 1), (1, 1), True, False, None),
    (3, 3, 2, 1, True, False, None),
]


@pytest.mark.parametrize("d, kernel, stride, padding, ceil_mode, include_pad, divisor", AVG_POOLS)
def test_avg_pool_matches_torch(rng, d, kernel, stride, padding, ceil_mode, include_pad, divisor):
    x = rng.standard_normal((2, 3) + (9, 10, 7)[:d]).astype(np.float32)
    pool = getattr(rc.nn, f"avg_pool{d}d")
    ref, emu = _both(lambda x: pool(x, kernel, stride, padding, ceil_mode, include_pad, divisor), {"x": x})
    want = getattr(F, f"avg_pool{d}d")(torch.from_numpy(x), kernel, stride, padding, ceil_mode, include_pad,
                                       *([divisor] if d > 1 else [])).numpy()
    close(ref[0], want)
    close(emu[0], want)


@pytest.mark.parametrize(
    "kernel, stride, padding, output_size",
    [(2, 2, 0, None), (3, 2, 1, (9, 10)), (3, 3, 0, (9, 10)), ((2, 3), (2, 3), 0, (9, 10))],
)
def test_max_unpool2d_inverts_max_pool2d_like_torch(rng, kernel, stride, padding, output_size):
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)

    def roundtrip(x):
        pooled, indices = rc.nn.max_pool2d(x, kernel, stride, padding, return_indices=True)
        return rc.nn.max_unpool2d(pooled, indices, kernel, stride, padding, output_size)

    ref, emu = _both(roundtrip, {"x": x})
    pooled, indices = F.max_pool2d(torch.from_numpy(x), kernel, stride, padding, return_indices=True)
    want = F.max_unpool2d(pooled, indices, kernel, stride, padding, output_size).numpy()
    exact(ref[0], want)
    exact(emu[0], want)


def test_max_unpool_takes_int32_ids_and_never_loses_a_value_silently(rng):
    x = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    ids = np.array([0, 3, 10, 15, 1, 2, 4, 5], np.int32).reshape(1, 2, 2, 2)
    got = rc.evaluate(
        rc.nn.max_unpool2d(rc.input("x", (1, 2, 2, 2)), rc.input("i", (1, 2, 2, 2), "int32"), 2),
        {"x": x, "i": ids},
    )
    exact(got, F.max_unpool2d(torch.from_numpy(x), torch.from_numpy(ids.astype(np.int64)), 2).numpy())
    with pytest.raises(rc.FeedError, match="input 'i'"):  # an id outside the 4 x 4 plane
        rc.evaluate(rc.nn.max_unpool2d(rc.input("x", (1, 2, 2, 2)), rc.input("i", (1, 2, 2, 2), "int32"), 2),
                    {"x": x, "i": np.full((1, 2, 2, 2), 16, np.int32)})
    outside = rc.evaluate(rc.nn.max_unpool2d(rc.input("x", (1, 2, 2, 2)), rc.input("p", (1, 2, 2, 2)), 2),
                          {"x": x, "p": np.where(ids == 15, 16, ids).astype(np.float32)})
    assert (
        np.isnan(outside[0, 0]).all() and not np.isnan(outside[0, 1]).any()
    )  # a float position past the plane


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather_matches_torch_with_int32_ids_and_float_positions(rng, dim):
    x = _input(rng, (4, 5, 6))
    x[0, 0, 1] = -0.0
    shape = [3, 4, 5]
    shape[dim] = 7
    ids = rng.integers(0, x.shape[dim], shape).astype(np.int32)
    want = torch.gather(torch.from_numpy(x), dim, torch.from_numpy(ids.astype(np.int64))).numpy()
    ref, emu = _both(lambda x, i: x.gather(dim, i), {"x": x, "i": ids})
    for got in (ref[0], emu[0]):
        exact(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
    floats = rc.evaluate(
        rc.input("x", x.shape).gather(dim, rc.input("p", tuple(shape))), {"x": x, "p": ids.astype(np.float32)}
    )
    exact(floats, want)


def test_gather_of_sort_positions_and_refusals(rng):
    values = rng.standard_normal((3, 8)).astype(np.float32)
    y = rc.input("y", (3, 8))
    exact(rc.evaluate(y.gather(1, y.argsort(-1, descending=True)), {"y": values}), -np.sort(-values, -1))
    x, ids = rc.input("x", (4, 5)), rc.input("i", (4, 2), "int32")
    with pytest.raises(rc.FeedError, match="input 'i'.*\\[0, 5\\)"):
        rc.evaluate(x.gather(1, ids), {"x": np.zeros((4, 5), np.float32), "i": np.full((4, 2), 5, np.int32)})
    with pytest.raises(rc.ShapeError, match="gather of input 'x'"):
        x.gather(1, rc.input("j", (5, 2), "int32"))  # longer than x on another axis
    assert np.isnan(
        rc.evaluate(
            x.gather(1, rc.input("p", (4, 1))),
            {"x": np.ones((4, 5), np.float32), "p": np.full((4, 1), 7.0, np.float32)},
        )
    ).all()


def test_pool_arguments_are_checked_by_name():
    x = rc.input("x", (1, 2, 8, 8))
    with pytest.raises(rc.ShapeError, match="max_pool2d.*half the kernel"):
        rc.nn.max_pool2d(x, 2, padding=2)
    with pytest.raises(rc.ShapeError, match="avg_pool2d.*divisor_override"):
        rc.nn.avg_pool2d(x, 2, divisor_override=0)
    with pytest.raises(rc.ShapeError, match="max_pool2d dilation"):
        rc.nn.max_pool2d(x, 2, dilation=0)
    with pytest.raises(rc.ShapeError, match="max_unpool2d.*output_size"):
        rc.nn.max_unpool2d(rc.input("p", (1, 2, 4, 4)), rc.input("q", (1, 2, 4, 4)), 2, output_size=(12, 12))


def test_onnx_maxpool_indices_match_onnx_reference(rng):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as TP, helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node(
        "MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1
    )
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 9, 10])],
        [
            helper.make_tensor_value_info("y", TP.FLOAT, list("nchw")),
            helper.make_tensor_value_info("i", TP.INT64, list("nchw")),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    want_y, want_i = ReferenceEvaluator(model).run(None, {"x": x})
    for backend in ("numpy", "emulator"):
        got = rc.onnx.import_model(model).run({"x": x}, backend=backend)
        exact(got["y"], want_y)
        assert got["i"].dtype == np.int64
        exact(got["i"], want_i)
    assert onnx is not None
