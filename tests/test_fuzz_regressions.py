"""Bugs the differential fuzzer (tests/test_fuzz.py, refcomp/fuzz/) found outside the search: each fixed
one stays as a regression test, and each still open (fuzz.KNOWN_BUGS) has a test named
test_known_bug_<name> here, which fails until the bug is fixed. Checked against the float64 NumPy
reference on the emulator.
"""
from __future__ import annotations

import numpy as np

import refcomp as rc
from refcomp import fuzz, golden


def test_every_known_bug_has_a_regression_test():
    tests = {name[len("test_known_bug_"):] for name in globals() if name.startswith("test_known_bug_")}
    assert set(fuzz.KNOWN_BUGS) <= tests


def _emulator_matches(outputs, feeds, dims=None, search=True):
    prog = rc.compile(outputs, search=search)
    got = prog.run(feeds, backend="emulator", dims=dims)
    want = rc.evaluate(outputs, feeds, dims=dims, precision="float64")
    for key in outputs:
        np.testing.assert_allclose(got[key], want[key], err_msg=key, **golden.FLOAT32_TOLERANCE)


def test_fixed_negative_power_constant():
    """mean over two axes of the same symbol divides by B**2: the constant B**(-2) must print as C."""
    x = rc.input("x", ("B", "B"))
    X = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    _emulator_matches({"mean": x.mean()}, {"x": X}, search=False)


def test_fixed_fused_read_through_prefix_slice():
    """A fused producer read through a prefix slice of a later axis must be read at the sliced position."""
    x = rc.input("x", (2, 2, 4))
    X = np.random.default_rng(0).standard_normal((2, 2, 4)).astype(np.float32)
    _emulator_matches({"prefix": (x * 2.0)[:, :, :2] * 1.5, "first": (x * 2.0)[:, :, 0:1] * -1.0}, {"x": X})


def test_fixed_nested_maximums_over_a_padded_symbolic_axis():
    """Used to take minutes to compile (index towers over T + 2); the values must match at two bindings."""
    x = rc.input("x", ("B", 4, "T"))
    y = (x.pad([(0, 0), (0, 0), (1, 1)]) * 0.5).maximum(-0.85).maximum(-0.5).maximum(-0.3)
    for shape in ((2, 4, 3), (1, 4, 6)):
        X = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        _emulator_matches({"y": y}, {"x": X})


def test_fixed_symbolic_strided_convolution():
    """A stride-2 convolution over symbolic H and W compiles (search on) and matches."""
    x, w = rc.input("x", ("N", 3, "H", "W")), rc.input("w", (4, 3, 3, 3))
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    for shape in ((1, 3, 7, 9), (2, 3, 10, 8)):
        _emulator_matches(
            {"y": rc.nn.conv2d(x, w, stride=2)}, {"x": rng.standard_normal(shape).astype(np.float32), "w": W}
        )


def test_fixed_zero_size_tensors_compile():
    x = rc.input("x", (20, 10, 5))
    out = rc.compile(x[:, 1000:1000] + 1.0).run({"x": np.zeros((20, 10, 5), np.float32)}, backend="emulator")
    assert out.shape == (20, 0, 5)
