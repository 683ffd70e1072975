"""frac ... tile (their values against torch: tests/torch_cases_methods.py) and conv's named paddings:
what torch refuses is a ShapeError, and count_nonzero is int64 as torch's."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc

torch = pytest.importorskip("torch")


def test_count_nonzero_is_int64_and_counts_nan():
    x = np.array([[0.0, np.nan, -0.0], [1.0, 0.0, 2.0]], np.float32)
    out = rc.input("x", (2, 3)).count_nonzero(1)
    assert out.dtype == "int64"
    np.testing.assert_array_equal(rc.evaluate(out, {"x": x}), torch.tensor(x).count_nonzero(1).numpy())


@pytest.mark.parametrize(
    "call, fragment",
    [
        ("x.narrow(1, 3, 2)", "do not fit"),
        ("x.narrow(1, -5, 1)", "do not fit"),
        ("x.narrow(1, 0, -1)", "do not fit"),
        ("x.narrow(1, 0.5, 1)", "must be ints"),
        ("x.mm(x.sum(0))", "2-D"),
        ("x.tile((-1,))", "negative"),
    ],
)
def test_what_torch_refuses_is_a_shape_error(call, fragment):
    with pytest.raises(Exception):
        eval(call, {"x": torch.zeros(3, 4)})  # noqa: S307
    with pytest.raises(rc.ShapeError, match=fragment):
        eval(call, {"x": rc.input("x", (3, 4))})  # noqa: S307


@pytest.mark.parametrize("kwargs", [{"padding": "same", "stride": 2}, {"padding": "full"}])
def test_a_named_padding_torch_refuses_is_a_shape_error(kwargs):
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    with pytest.raises((RuntimeError, ValueError)):
        torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), **kwargs)
    with pytest.raises(rc.ShapeError, match="padding"):
        rc.nn.conv2d(rc.input("x", x.shape), rc.input("w", w.shape), **kwargs)



@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("call", ["x.sign()", "x.relu()", "x.trunc()", "x.floor()", "x.ceil()", "x.round()",
                                  "x.copysign(x - 1)", "x.copysign(-1.0)", "x.abs()", "x.clamp(-1, 3)"])
def test_integer_tensors_keep_torchs_result_type(call, dtype):
    """An integer tensor's floor, sign or relu is an integer tensor, its copysign a float one (these
    were float32 where torch keeps the integers)."""
    x = np.array([-7, -1, 0, 2, 9], dtype)
    out = eval(call, {"x": rc.input("x", (5,), dtype)})  # noqa: S307  (the literals above)
    want = eval(call, {"x": torch.tensor(x)})  # noqa: S307
    assert out.dtype == str(want.dtype).replace("torch.", "")
    np.testing.assert_array_equal(rc.evaluate(out, {"x": x}), want.numpy())
