"""int64, int32 and float64 tensors computed exactly, against PyTorch on the CPU: on the reference,
and compiled (search on and off) on the emulator and by nvcc. Edge values: wrapping at 2^63 and
2^31, integers past 2^24 and 2^53 (where float32 and float64 lose them), C's remainder signs,
float-to-integer truncation, and float64 digits float32 does not hold."""
import numpy as np
import pytest
import torch

import refcomp as rc
from refcomp.codegen.access import global_counts
from refcomp.exec.nvcc import nvcc_available, nvcc_check

BIG = np.array([2**62, -7, 2**40 + 1, 5, -(2**63), 2**53 + 1, -3, 0], np.int64)
OTHER = np.array([2**62, 2, 3, -9, -1, 1, 7, -5], np.int64)
SMALL = np.array([2**31 - 1, -(2**31), 7, -7, 100000, 3, -1, 0], np.int32)
REALS = np.array([0.1, -2.5, 1e300, 3.0 + 2**-40, -1e-300, 7.75, 2.0**60, -0.0])
FLOATS = np.array([2.9, -2.9, 1e10, -1e19, np.nan, 0.5, -0.0, 16777217.0], np.float32)


def _programs():
    """(name, refcomp builder, torch function) over inputs x, y (int64), s (int32), d (float64),
    f (float32)."""
    return [
        ("add wraps", lambda x, y, s, d, f: x + y),
        ("mul wraps", lambda x, y, s, d, f: x * y),
        ("neg, sub and scalars", lambda x, y, s, d, f: 3 - x * 5 + 1),
        ("constants past 2^53", lambda x, y, s, d, f: x * 4611686018427387911 + (-(2**63)) + 2**60),
        ("fmod signs", lambda x, y, s, d, f: torch.fmod(x, y) if isinstance(x, torch.Tensor)
         else rc.fmod(x, y)),
        ("comparison", lambda x, y, s, d, f: (x < y).long()),
        ("where", lambda x, y, s, d, f: torch.where(x < y, x, y) if isinstance(x, torch.Tensor)
         else rc.where(x < y, x, y)),
        ("sum past 2^53", lambda x, y, s, d, f: (x * 3).sum(0)),
        ("max", lambda x, y, s, d, f: y.amax(0)),
        ("int32 wraps", lambda x, y, s, d, f: s * s + s),
        ("int32 widens with int64", lambda x, y, s, d, f: s + y),
        ("int64 to float32", lambda x, y, s, d, f: x.float() * 0.5),
        ("int64 with a Python float", lambda x, y, s, d, f: x * 0.25),
        ("float32 to int64 truncates", lambda x, y, s, d, f: (f * 3).long()),
        ("int64 to int32 wraps", lambda x, y, s, d, f: (x + 2**33 + 5).int()),
        ("float32 past int32's range", lambda x, y, s, d, f: (f * 3).int()),  # int32's lowest, as x86's
        ("float64 keeps its digits", lambda x, y, s, d, f: d * 3 + 0.1),
        ("float64 sum", lambda x, y, s, d, f: (d * d).sum(0)),
        ("float64 sqrt and division", lambda x, y, s, d, f: (d.abs() + 1).sqrt() / 3),
        ("float64 with float32", lambda x, y, s, d, f: d + f.double() * f),
        ("int64 sqrt is float32", lambda x, y, s, d, f: (y * y).sqrt()),
    ]


def _feeds():
    return {"x": BIG, "y": OTHER, "s": SMALL, "d": REALS, "f": FLOATS}


def _rc_inputs():
    return [rc.input("x", (8,), "int64"), rc.input("y", (8,), "int64"), rc.input("s", (8,), "int32"),
            rc.input("d", (8,), "float64"), rc.input("f", (8,))]


def _torch_values():
    return [torch.tensor(v) for v in (BIG, OTHER, SMALL, REALS, FLOATS)]


def _outputs():
    ins = _rc_inputs()
    return {name: build(*ins) for name, build in _programs()}


def _expected():
    ts = _torch_values()
    return {name: build(*ts).numpy() for name, build in _programs()}


def _same(name, got, want):
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, PyTorch {want.dtype}"
    np.testing.assert_array_equal(got, want, err_msg=name)


def test_the_reference_computes_each_type_as_pytorch_does():
    got = rc.evaluate(_outputs(), _feeds())
    for name, want in _expected().items():
        _same(name, got[name], want)


@pytest.mark.parametrize("search", [False, True], ids=["plain", "searched"])
def test_compiled_kernels_compute_each_type_exactly_on_the_emulator(search):
    got = rc.compile(_outputs(), search=search).run(_feeds(), backend="emulator")
    for name, want in _expected().items():
        _same(name, got[name], want)


def test_the_kernels_build_with_nvcc_and_hold_each_type():
    reason = nvcc_available()
    if reason:
        pytest.skip(f"nvcc check skipped: {reason}")
    prog = rc.compile(_outputs(), cache=False)
    assert "const long long* __restrict__" in prog.source and "const double* __restrict__" in prog.source
    assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_the_cost_model_counts_eight_byte_elements(dtype):
    """A copy-and-scale of 1,024 elements moves 8 KiB in and 8 KiB out, twice float32's bytes."""
    wide = rc.compile(rc.input("x", (1024,), dtype) * 3, search=False).kernels[0]
    narrow = rc.compile(rc.input("x", (1024,)) * 3, search=False).kernels[0]
    assert global_counts(wide, {}).global_bytes == 2 * global_counts(narrow, {}).global_bytes == 16384


def test_integer_ids_computed_at_run_time_are_checked_before_the_lookup():
    ids = rc.input("ids", (3,), "int64")
    table = rc.input("table", (4, 2))
    rows = rc.nn.embedding(ids * 2 - 1, table)
    feeds = {"ids": np.array([1, 2, 1]), "table": np.arange(8, dtype=np.float32).reshape(4, 2)}
    want = torch.nn.functional.embedding(torch.tensor(feeds["ids"]) * 2 - 1, torch.tensor(feeds["table"]))
    prog = rc.compile(rows)
    np.testing.assert_array_equal(prog.run(feeds, backend="emulator"), want.numpy())
    bad = {**feeds, "ids": np.array([1, 3, 1])}  # 3 * 2 - 1 = 5 is past the table's 4 rows
    with pytest.raises(rc.RefcompError, match="5"):
        rc.evaluate(rows, bad)
    with pytest.raises(rc.RefcompError, match="5"):
        prog.run(bad, backend="emulator")


def test_feeds_must_fit_the_integer_type():
    s = rc.input("s", (2,), "int32")
    with pytest.raises(rc.FeedError, match="input 's'.*int32"):
        rc.evaluate(s + 1, {"s": np.array([2**31, 0])})
    with pytest.raises(rc.FeedError, match="input 's' takes int32"):
        rc.evaluate(s + 1, {"s": np.array([0.5, 1.0])})


def test_integer_creations_are_exact_past_float32():
    got = rc.evaluate([rc.arange(2**25, 2**25 + 4, dtype=rc.int64),
                       rc.full((2,), 2**40 + 1, dtype=rc.int64)], {})
    _same("arange", got[0], torch.arange(2**25, 2**25 + 4, dtype=torch.int64).numpy())
    _same("full", got[1], torch.full((2,), 2**40 + 1, dtype=torch.int64).numpy())


def test_the_profiler_counts_the_bytes_the_cost_model_prices():
    """The instrumented build computes the same integers and doubles, stores every output byte, and
    its memory counts are the cost model's."""
    from refcomp.exec.profile import model_disagreements
    prog = rc.compile(_outputs(), cache=False)
    p = prog.profile(_feeds())
    for name, want in _expected().items():
        _same(name, p.outputs[name], want)
    assert model_disagreements(prog, p) == []
    assert p.total.global_store_sectors * 32 >= sum(v.nbytes for v in p.outputs.values())
