"""Helpers of the Tensor API tests (test_tensor_api.py, test_tensor_movement.py, test_nn_api.py):
evaluate a function of inputs with the reference, compare against NumPy, random and special values."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc

try:
    import torch
except ImportError:  # torch is an optional test dependency
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -3.5, np.inf, -np.inf, np.nan, 1e-30, -1e30, 88.0], np.float32)


def run(fn, *arrays, dims=None, precision="float32"):
    """Evaluate fn(*inputs) with one rc.input per array (int32 for integer arrays)."""
    inputs = [
        rc.input(f"a{i}", a.shape, "int32" if a.dtype.kind in "iu" else "float32")
        for i, a in enumerate(arrays)
    ]
    return rc.evaluate(
        fn(*inputs), {f"a{i}": a for i, a in enumerate(arrays)}, dims=dims, precision=precision
    )


def close(got, expected, rtol=2e-5, atol=1e-6):
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def exact(got, expected):
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_array_equal(got, expected)


def f32(rng, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)
