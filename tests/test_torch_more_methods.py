"""frac, fmod, remainder, where, logit, nan_to_num, nansum, count_nonzero, norm, mm, narrow and tile as
Tensor methods, each against torch on the CPU (the oracle) on values with NaN, infinities, -0.0 and
both signs, and refused where torch refuses."""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc

torch = pytest.importorskip("torch")


def _values(shape, seed: int = 0, specials: bool = True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    if specials:
        flat = x.reshape(-1)
        flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 2.5, -3.0][: flat.size]
        rng.shuffle(flat)
    return x


def _check(call: str, shape=(3, 4), seed: int = 0, specials: bool = True, rtol: float = 1e-6):
    x = _values(shape, seed, specials)
    want = eval(call, {"x": torch.tensor(x), "math": math, "torch": torch})  # noqa: S307  (test literals)
    got = rc.evaluate(
        eval(call, {"x": rc.input("x", shape), "math": math, "torch": rc}), {"x": x}  # noqa: S307
    )
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.shape == want.shape, (call, got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=1e-6,
                               equal_nan=True, err_msg=call)
    assert np.array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0])), call  # -0.0 kept alike


@pytest.mark.parametrize(
    "call",
    [
        "x.frac()",
        "x.fmod(2.5)",
        "x.fmod(-1.5)",
        "x.remainder(2.5)",
        "x.remainder(-1.5)",
        "x.where(x > 0, -1.0)",
        "x.where(x.isnan(), x * 2)",
        "x.nan_to_num()",
        "x.nan_to_num(nan=1.5, posinf=7.0, neginf=-8.0)",
        "x.nan_to_num(posinf=2.0)",
        "x.nansum()",
        "x.nansum(1)",
        "x.nansum(dim=0, keepdim=True)",
        "x.count_nonzero()",
        "x.count_nonzero(0)",
        "x.count_nonzero(dim=(0, 1))",
        "x.narrow(1, 1, 2)",
        "x.narrow(0, -2, 2)",
        "x.narrow(1, 4, 0)",
        "x.tile((2,))",
        "x.tile((2, 1, 1))",
        "x.tile(3)",
    ],
)
def test_methods_with_special_values_match_torch(call):
    _check(call)


@pytest.mark.parametrize(
    "call",
    [
        "x.norm()",
        "x.norm(2, 1)",
        "x.norm(p=1)",
        "x.norm(p=1, dim=0, keepdim=True)",
        "x.norm(p=math.inf, dim=1)",
        "x.norm(p=-math.inf)",
        "x.norm(p=0, dim=1)",
        "x.norm(p=3)",
        "x.norm(p=0.5, dim=(0, 1))",
        "x.norm(p=-2, dim=1)",
        "x.norm(dim=1, keepdim=True)",
        "x.mm(x.T)",
        "x.sigmoid().logit()",
        "x.sigmoid().logit(eps=1e-3)",
        "x.logit(0.25)",
    ],
)
def test_norms_products_and_logit_match_torch(call):
    _check(call, specials=False, rtol=2e-5)  # sums of squares: float32 rounding, torch accumulates wider


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


@pytest.mark.parametrize("p", ["nuc", float("nan")])
def test_norms_torch_has_and_refcomp_does_not_are_refused_saying_so(p):
    """The nuclear norm (torch computes it by an SVD) and p = NaN: a ShapeError naming p."""
    torch.zeros(3, 4).norm(p=p)  # torch takes both
    with pytest.raises(rc.ShapeError, match="p must be a number or 'fro'"):
        rc.input("x", (3, 4)).norm(p=p)

