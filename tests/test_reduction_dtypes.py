"""PyTorch's `dtype=` of the reductions, scans and softmaxes (issue 28): the input is converted first and
the result has the requested type, whatever the input's (a float16 softmax asked for float32 is
float32, not rounded back to float16). Checked against PyTorch on the CPU for every pair of float
types, and for integer, float64 and bool requests: refused where PyTorch refuses them (and for bool,
which refcomp does not type), computed as PyTorch does otherwise."""
import numpy as np
import pytest

import refcomp as rc
from api_helpers import needs_torch, torch

pytestmark = needs_torch

FLOATS = ("float32", "float16", "bfloat16")
ULP = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
# name -> (refcomp call, PyTorch call); dtype=None leaves it out, as a user would
CALLS = {
    "softmax": (lambda x, d: x.softmax(1, dtype=d), lambda t, d: t.softmax(1, dtype=d)),
    "softmax positional": (lambda x, d: x.softmax(1, d), lambda t, d: t.softmax(1, d)),
    "log_softmax": (lambda x, d: x.log_softmax(-1, dtype=d), lambda t, d: t.log_softmax(-1, dtype=d)),
    "softmin": (lambda x, d: x.softmin(0, dtype=d), lambda t, d: torch.nn.functional.softmin(t, 0, dtype=d)),
    "nn.softmax": (
        lambda x, d: rc.nn.softmax(x, 0, dtype=d),
        lambda t, d: torch.nn.functional.softmax(t, 0, dtype=d),
    ),
    "nn.log_softmax": (
        lambda x, d: rc.nn.log_softmax(x, 1, dtype=d),
        lambda t, d: torch.nn.functional.log_softmax(t, 1, dtype=d),
    ),
    "sum": (lambda x, d: x.sum(dtype=d), lambda t, d: t.sum(dtype=d)),
    "sum dim": (lambda x, d: x.sum(1, dtype=d), lambda t, d: t.sum(1, dtype=d)),
    "rc.sum": (lambda x, d: rc.sum(x, (0, 1), dtype=d), lambda t, d: torch.sum(t, (0, 1), dtype=d)),
    "mean": (lambda x, d: x.mean(dtype=d), lambda t, d: t.mean(dtype=d)),
    "mean dim": (lambda x, d: x.mean(0, True, dtype=d), lambda t, d: t.mean(0, True, dtype=d)),
    "prod": (lambda x, d: x.prod(1, dtype=d), lambda t, d: t.prod(1, dtype=d)),
    "cumsum": (lambda x, d: x.cumsum(1, dtype=d), lambda t, d: t.cumsum(1, dtype=d)),
    "cumprod": (lambda x, d: x.cumprod(0, dtype=d), lambda t, d: t.cumprod(0, dtype=d)),
}


def _values(dtype: str) -> np.ndarray:
    """Positive values (no cancellation in the sums), exactly representable in `dtype`."""
    x = np.random.default_rng(3).uniform(0.5, 1.5, (4, 6)).astype(np.float32)
    return torch.from_numpy(x).to(getattr(torch, dtype)).float().numpy()


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("source", FLOATS)
@pytest.mark.parametrize("requested", (None,) + FLOATS)
def test_the_result_has_the_requested_dtype_and_torchs_values(name, source, requested):
    ours, theirs = CALLS[name]
    x = _values(source)
    want = theirs(
        torch.from_numpy(x).to(getattr(torch, source)),
        None if requested is None else getattr(torch, requested),
    )
    out = ours(rc.input("x", x.shape, source), requested)
    assert out.dtype == str(want.dtype).replace("torch.", ""), (name, source, requested)
    got = np.asarray(rc.evaluate(out, {"x": x}), np.float32)
    # PyTorch's CPU kernels may round a 16-bit intermediate (a mean's sum) that refcomp keeps in float32
    np.testing.assert_allclose(got, want.float().numpy(), rtol=4 * ULP[out.dtype], atol=1e-6)


def test_a_float16_softmax_asked_for_float32_keeps_float32_precision():
    """The regression of issue 28: the float32 result is not rounded to float16 on the way out."""
    x = np.array([[0.0, 1e-3, 2e-3]], np.float16)
    out = rc.input("x", (1, 3), "float16").softmax(1, dtype=rc.float32)
    got = rc.evaluate(out, {"x": x})
    want = torch.from_numpy(x).softmax(1, dtype=torch.float32).numpy()
    assert out.dtype == "float32" and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.array_equal(got, got.astype(np.float16).astype(np.float32))  # more than float16 holds


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("requested", ["int64", "int32", "bool", "float64"])
def test_integer_float64_and_bool_requests_do_what_torch_does(name, requested):
    """Where PyTorch refuses the type (a softmax in int64), refcomp refuses it too; where it computes it,
    refcomp gives its type and values (a sum in int64 truncates each value first); bool results, which
    refcomp does not type, are refused by name."""
    x = _values("float16") * 3
    try:
        want = CALLS[name][1](torch.from_numpy(x).half(), getattr(torch, requested))
    except RuntimeError:
        want = None
    if want is None or requested == "bool":
        with pytest.raises(rc.RefcompError) as raised:
            CALLS[name][0](rc.input("x", (4, 6), "float16"), requested)
        assert "dtype=" in str(raised.value) and "input 'x'" in str(raised.value), str(raised.value)
        return
    out = CALLS[name][0](rc.input("x", (4, 6), "float16"), requested)
    got = rc.evaluate(out, {"x": x.astype(np.float16)})
    assert got.dtype == want.numpy().dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want.numpy(), rtol=0 if requested != "float64" else 1e-12)


def test_compiled_on_the_emulator_the_result_is_float32():
    x = _values("float16")
    t = rc.input("x", x.shape, "float16")
    outs = {"soft": t.softmax(1, dtype="float32"), "mean": t.mean(0, dtype="float32")}
    got = rc.compile(outs, search=False, cache=False).run({"x": x.astype(np.float16)}, backend="emulator")
    tx = torch.from_numpy(x).half()
    for name, want in (
        ("soft", tx.softmax(1, dtype=torch.float32)),
        ("mean", tx.mean(0, dtype=torch.float32)),
    ):
        assert got[name].dtype == np.float32
        np.testing.assert_allclose(got[name], want.numpy(), rtol=1e-6, atol=1e-7)
