"""Tensor views and movement (reshape, permute, transpose, expand, squeeze, flip, pad, indexing,
iteration, concat, stack, arange) under the reference interpreter, against NumPy written directly."""
from __future__ import annotations


import numpy as np
import pytest

import refcomp as rc

from api_helpers import exact, f32, run


# --- movement ------------------------------------------------------------------------------------

def test_reshape_forms(rng):
    a = f32(rng, 2, 3, 4)
    exact(run(lambda x: x.reshape(-1), a), a.reshape(-1))
    exact(run(lambda x: x.reshape(4, -1), a), a.reshape(4, -1))
    exact(run(lambda x: x.reshape((3, 8)), a), a.reshape(3, 8))
    exact(run(lambda x: x.reshape([2, 12]), a), a.reshape(2, 12))
    exact(run(lambda x: x.reshape(x.shape[0], x.shape[1] * x.shape[2]), a), a.reshape(2, 12))
    exact(run(lambda x: x.reshape(x.shape[2], -1), a), a.reshape(4, -1))
    exact(run(lambda x: x.T.reshape(-1, 2), a), a.T.reshape(-1, 2))
    exact(run(lambda x: x.reshape(1, 24, 1), a), a.reshape(1, 24, 1))
    exact(run(lambda x: x.reshape(()), np.array([3.0], np.float32)), np.float32(3.0))


def test_symbolic_reshape_with_shape_dims(rng):
    x = rc.input("x", ("B", "T", 6))
    merged = x.reshape(x.shape[0] * x.shape[1], -1)
    split = merged.reshape(x.shape[0], x.shape[1], 2, 3)
    for b, t in [(2, 3), (1, 4)]:
        a = f32(rng, b, t, 6)
        exact(rc.evaluate(merged, {"x": a}), a.reshape(b * t, 6))
        exact(rc.evaluate(split, {"x": a}), a.reshape(b, t, 2, 3))


def test_permute_transpose_T_expand_unsqueeze_squeeze_flip(rng):
    a = f32(rng, 2, 3, 4)
    exact(run(lambda x: x.permute(2, 0, 1), a), a.transpose(2, 0, 1))
    exact(run(lambda x: x.permute((1, 2, 0)), a), a.transpose(1, 2, 0))
    exact(run(lambda x: x.permute(-1, 0, -2), a), a.transpose(2, 0, 1))
    exact(run(lambda x: x.transpose(0, 2), a), np.swapaxes(a, 0, 2))
    exact(run(lambda x: x.transpose(), a), np.swapaxes(a, -2, -1))
    exact(run(lambda x: x.T, a), a.T)
    exact(run(lambda x: x.unsqueeze(1), a), a[:, None])
    exact(run(lambda x: x.unsqueeze(-1), a), a[..., None])
    exact(run(lambda x: x.unsqueeze(0).squeeze(0), a), a)
    exact(run(lambda x: x[:, :1].squeeze(1), a), a[:, 0])
    exact(run(lambda x: x[:, :1].expand(2, 5, 4), a), np.broadcast_to(a[:, :1], (2, 5, 4)))
    exact(run(lambda x: x[:, :1].expand(3, -1, 6, -1), a), np.broadcast_to(a[:, :1], (3, 2, 6, 4)))
    exact(run(lambda x: x[:, :1].expand((2, 2, 4)), a), np.broadcast_to(a[:, :1], (2, 2, 4)))
    exact(run(lambda x: x.broadcast_to((5, 2, 3, 4)), a), np.broadcast_to(a, (5, 2, 3, 4)))
    exact(run(lambda x: x.flip(), a), np.flip(a))
    exact(run(lambda x: x.flip(1), a), np.flip(a, 1))
    exact(run(lambda x: x.flip((0, -1)), a), np.flip(a, (0, 2)))


@pytest.mark.parametrize("value", [0.0, 1.5, -7.0, np.inf, -np.inf])
def test_pad(rng, value):
    a = f32(rng, 2, 3)
    widths = [(1, 2), (0, 3)]
    exact(run(lambda x: x.pad(widths, value=value), a), np.pad(a, widths, constant_values=value))
    exact(
        run(lambda x: x.pad([(0, 0), (2, 0)], value), a), np.pad(a, [(0, 0), (2, 0)], constant_values=value)
    )


@pytest.mark.parametrize(
    "index",
    [
        0,
        -1,
        2,
        (1, 2),
        (-2, -3),
        slice(1, 3),
        slice(None, None, 2),
        slice(None, None, -1),
        slice(3, 0, -2),
        slice(-1, -5, -1),
        (Ellipsis, 1),
        (Ellipsis, slice(None, None, -2)),
        (None, 1),
        (1, None, Ellipsis, None),
        (slice(1, None), None, slice(None, 2), 3),
        (Ellipsis,),
        (),
        (slice(10, 20),),
        (slice(-10, None, 3), Ellipsis, -1),
        (slice(None), slice(None), slice(None, None, -3)),
        (0, 0, 0),
        (None,),
    ],
)
def test_getitem(rng, index):
    a = f32(rng, 4, 5, 6)
    exact(run(lambda x: x[index], a), a[index])


def test_iteration_unpacks_rows(rng):
    a = f32(rng, 3, 2)
    x = rc.input("x", (3, 2))
    rows = list(x)
    assert len(rows) == 3
    for got, want in zip(rc.evaluate(rows, {"x": a}), a):
        exact(got, want)
    first, second = rc.input("pair", (2, 4))
    assert first.shape == (4,)
    with pytest.raises(rc.ShapeError, match="iterate"):
        list(rc.input("t", ("T", 2)))
    with pytest.raises(rc.ShapeError, match="iterate"):
        iter(rc.constant(1.0))


def test_concat_stack(rng):
    a, b, c = f32(rng, 2, 3), f32(rng, 4, 3), f32(rng, 2, 3)
    exact(run(lambda x, y: rc.concat([x, y]), a, b), np.concatenate([a, b]))
    exact(
        run(lambda x, y, z: rc.concat([x, y.T[:2], z], axis=-1), a, b, c), np.concatenate([a, b.T[:2], c], -1)
    )
    exact(run(lambda x, z: rc.stack([x, z]), a, c), np.stack([a, c]))
    exact(run(lambda x, z: rc.stack([x, z], axis=-1), a, c), np.stack([a, c], -1))
    exact(run(lambda x, z: rc.stack([x, z, x], axis=1), a, c), np.stack([a, c, a], 1))
    special = np.array([np.inf, -np.inf, np.nan], np.float32)
    exact(run(lambda x: rc.concat([x, x[::-1]]), special), np.concatenate([special, special[::-1]]))


def test_arange():
    exact(rc.evaluate(rc.arange(5), {}), np.arange(5, dtype=np.float32))
    exact(rc.evaluate(rc.arange(2, 11, 3), {}), np.arange(2, 11, 3, dtype=np.float32))
    exact(rc.evaluate(rc.arange(5, -4, -2), {}), np.arange(5, -4, -2, dtype=np.float32))
    exact(rc.evaluate(rc.arange(3, 7), {}), np.arange(3, 7, dtype=np.float32))
    exact(rc.evaluate(rc.arange(0), {}), np.arange(0, dtype=np.float32))
    exact(rc.evaluate(rc.arange(5, 2), {}), np.arange(5, 2, dtype=np.float32))
    n = rc.arange("N")
    assert str(n.shape[0]) == "N"
    exact(rc.evaluate(n * 2.0, {}, dims={"N": 4}), np.arange(4, dtype=np.float32) * 2)
