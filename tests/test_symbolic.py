"""Symbolic dimensions: normalisation, equality, idiv/imod, evaluation, and binding from feeds."""
from __future__ import annotations

import numpy as np
import pytest
import sympy

import refcomp as rc
from refcomp.symbolic.dims import (
    dim,
    dims_equal,
    evaluate_dim,
    evaluate_value,
    expand,
    free_symbols,
    idiv,
    imod,
    prod,
    symbol,
)


T, B = symbol("T"), symbol("B")


# --- normalisation -------------------------------------------------------------------------------

def test_ints_stay_ints():
    for value in (0, 7, np.int64(7), np.int32(3), sympy.Integer(5), sympy.Integer(2) * 3):
        d = dim(value)
        assert type(d) is int and d == int(value)


def test_names_become_positive_integer_symbols():
    d = dim("T")
    assert isinstance(d, sympy.Symbol) and d.name == "T"
    assert d.is_integer and d.is_positive
    assert d == T and dims_equal(d, T)


def test_user_sympy_symbols_are_made_canonical():
    plain = sympy.Symbol("T")  # no assumptions: would otherwise never equal dim("T")
    assert dim(plain) == T
    assert dims_equal(dim(2 * plain + 1), 2 * T + 1)
    x = rc.input("x", (plain, 2))
    y = rc.input("y", ("T",))
    out = x[:, 0] + y  # the two spellings of T must broadcast as one dim
    np.testing.assert_array_equal(
        rc.evaluate(out, {"x": np.ones((3, 2), np.float32), "y": np.ones(3, np.float32)}), [2, 2, 2]
    )


def test_expressions_are_kept():
    d = dim(2 * T + 1)
    assert isinstance(d, sympy.Expr) and d == 2 * T + 1


@pytest.mark.parametrize("bad", [True, 3.0, 2.5, None, "1T", "T-1", [3], sympy.Float(2.0) + 0.5])
def test_bad_dims_are_shape_errors(bad):
    with pytest.raises(rc.ShapeError, match="dimension"):
        dim(bad)


def test_dims_equal():
    assert dims_equal(3, 3) and not dims_equal(3, 4)
    assert dims_equal(2 * T, T + T)
    assert dims_equal(T * (T + 1), T ** 2 + T)
    assert dims_equal(dim(B * T), dim(T * B))
    assert not dims_equal(T, 3)
    assert not dims_equal(T, B)
    assert dims_equal(dim(sympy.Integer(4)), 4)


def test_prod_and_free_symbols():
    assert prod([]) == 1
    assert prod([2, 3, 4]) == 24 and type(prod([2, 3])) is int
    assert dims_equal(prod([B, 2, T]), 2 * B * T)
    assert free_symbols(prod([B, 2, T])) == {B, T}
    assert free_symbols(5) == set()


# --- idiv / imod ---------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [(7, 2), (8, 2), (0, 3), (5, 1), (1, 4), (17, 5)])
def test_idiv_imod_on_ints(a, b):
    assert idiv(a, b) == a // b
    assert imod(a, b) == a % b


def test_idiv_imod_simplify_exact_cases():
    assert idiv(T, 1) == T
    assert idiv(2 * T, 2) == T
    assert idiv(6 * T * B, 3 * T) == 2 * B
    assert idiv(0, T) == 0
    assert imod(2 * T, 2) == 0
    assert imod(T, 1) == 0
    assert imod(T * B, T) == 0


@pytest.mark.parametrize("t", [1, 2, 3, 7, 10])
def test_idiv_imod_evaluate_as_floor_division_and_remainder(t):
    for expr, expected in [
        (idiv(T + 1, 2), (t + 1) // 2),
        (imod(T, 3), t % 3),
        (idiv(2 * T + 3, 4) + 1, (2 * t + 3) // 4 + 1),
        (imod(T + 5, 4) * idiv(T, 3), ((t + 5) % 4) * (t // 3)),
        (idiv(T - 1, 2) + 1, (t - 1) // 2 + 1),
    ]:
        assert evaluate_dim(dim(expr), {"T": t}) == expected, expr


def test_idiv_imod_are_integer_and_nonnegative():
    assert idiv(T + 1, 2).is_integer and idiv(T + 1, 2).is_nonnegative
    assert imod(T, 3).is_integer and imod(T, 3).is_nonnegative


def test_expand_is_sympys_expand():
    """dims.expand skips SymPy for what is already expanded; the answer must be SymPy's, to the tree."""
    i, j = (
        sympy.Symbol("i", integer=True, nonnegative=True),
        sympy.Symbol("j", integer=True, nonnegative=True),
    )
    for e in [
        i,
        3,
        32 * T * i + j,
        128 * T**2 * i + 4 * B * j + 7,
        i + idiv(32 * T * j + i, 4 * T),
        2 * imod(i + T, 3) * j,
        (T + 1) * i,
        (i + j) ** 2,
        idiv((T + 1) * i, 2),
        T * (B + 1) - T,
        i / 2 + T / 3,
        T**-1 * i,
        2 * (T + 1),
    ]:
        assert sympy.srepr(expand(e)) == sympy.srepr(sympy.expand(e)), e


# --- evaluation ----------------------------------------------------------------------------------

def test_evaluate_dim():
    assert evaluate_dim(5, {}) == 5
    assert evaluate_dim(T, {"T": 4}) == 4
    assert evaluate_dim(dim(2 * T * B + 1), {"T": 3, "B": 5, "unused": 9}) == 31


def test_evaluate_dim_with_a_missing_binding():
    with pytest.raises(rc.BindingError, match=r"dimension B is unbound.*dims=\{'B'"):
        evaluate_dim(dim(T * B), {"T": 3})
    with pytest.raises(rc.BindingError, match="dimension B, T is unbound"):
        evaluate_dim(dim(T * B), {})


def test_evaluate_value():
    assert evaluate_value(2.5, {}) == 2.5
    assert evaluate_value(1 / T, {"T": 4}) == 0.25
    assert evaluate_value(sympy.sqrt(T), {"T": 9}) == 3.0
    with pytest.raises(rc.BindingError, match="dimension T is unbound"):
        evaluate_value(1 / T, {})


# --- symbolic shapes through the Tensor API --------------------------------------------------------

def test_concat_of_T_and_T_has_shape_2T(rng):
    x = rc.input("x", ("T", 3))
    out = rc.concat([x, x * 2.0])
    assert dims_equal(out.shape[0], 2 * T) and out.shape[1] == 3
    for t in (1, 4):
        a = rng.standard_normal((t, 3)).astype(np.float32)
        np.testing.assert_array_equal(rc.evaluate(out, {"x": a}), np.concatenate([a, a * 2]))


def test_stack_and_mixed_concat(rng):
    x, y = rc.input("x", ("T",)), rc.input("y", (2,))
    out = rc.concat([x, y, x])
    assert dims_equal(out.shape[0], 2 * T + 2)
    a, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    np.testing.assert_array_equal(rc.evaluate(out, {"x": a, "y": b}), np.concatenate([a, b, a]))
    st = rc.stack([x, x + 1.0], axis=1)
    assert dims_equal(st.shape[0], T) and st.shape[1] == 2
    np.testing.assert_array_equal(rc.evaluate(st, {"x": a}), np.stack([a, a + 1], 1))


def test_mean_and_var_over_symbolic_axes(rng):
    x = rc.input("x", ("B", "T"))
    for b, t in [(2, 3), (3, 7)]:
        a = rng.standard_normal((b, t)).astype(np.float32)
        got = rc.evaluate(
            [x.mean(1), x.mean(), x.var(1, correction=0), x.softmax(-1), x.cumsum(1), x.argmax(1)], {"x": a}
        )
        a64 = a.astype(np.float64)
        np.testing.assert_allclose(got[0], a64.mean(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], a64.mean(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2], a64.var(1), rtol=1e-5, atol=1e-6)
        e = np.exp(a64 - a64.max(1, keepdims=True))
        np.testing.assert_allclose(got[3], e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(got[4], np.cumsum(a64, 1), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[5], np.argmax(a, 1))


@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, 1, 1), (3, 0, 2), (2, 2, 1)])
def test_strided_conv_output_size_is_an_idiv(rng, stride, padding, dilation):
    x, w = rc.input("x", (1, 2, "H", "W")), rc.input("w", (3, 2, 3, 3))
    out = rc.nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    for h, wd in [(7, 8), (12, 9)]:
        ho = (h + 2 * padding - dilation * 2 - 1) // stride + 1
        wo = (wd + 2 * padding - dilation * 2 - 1) // stride + 1
        assert evaluate_dim(out.shape[2], {"H": h}) == ho and evaluate_dim(out.shape[3], {"W": wd}) == wo
        a, k = (
            rng.standard_normal((1, 2, h, wd)).astype(np.float32),
            rng.standard_normal((3, 2, 3, 3)).astype(np.float32),
        )
        got = rc.evaluate(out, {"x": a, "w": k})
        assert got.shape == (1, 3, ho, wo)
        ap = np.pad(a.astype(np.float64), [(0, 0), (0, 0), (padding,) * 2, (padding,) * 2])
        i, j = ho - 1, wo - 1  # spot-check the last output position
        window = ap[
            0,
            :,
            i * stride : i * stride + 2 * dilation + 1 : dilation,
            j * stride : j * stride + 2 * dilation + 1 : dilation,
        ]
        np.testing.assert_allclose(got[0, :, i, j], np.einsum("chw,ochw->o", window, k), rtol=1e-4, atol=1e-5)


# --- bindings ------------------------------------------------------------------------------------

def test_bindings_are_read_off_the_feeds(rng):
    x, y = rc.input("x", ("B", "T")), rc.input("y", ("T",))
    out = x + y + rc.arange("T")
    for b, t in [(1, 1), (2, 5)]:
        a, c = rng.standard_normal((b, t)).astype(np.float32), rng.standard_normal(t).astype(np.float32)
        np.testing.assert_allclose(rc.evaluate(out, {"x": a, "y": c}), a + c + np.arange(t), rtol=1e-6)


def test_dims_bind_symbols_no_feed_has():
    n = rc.arange("N")
    np.testing.assert_array_equal(rc.evaluate(n, {}, dims={"N": 3}), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(rc.evaluate(n, {}, dims={"N": np.int64(2)}), [0.0, 1.0])
    x = rc.input("x", ("T",))
    both = x.sum() + n.sum()
    np.testing.assert_allclose(rc.evaluate(both, {"x": np.ones(4, np.float32)}, dims={"N": 3}), 4.0 + 3.0)
    np.testing.assert_allclose(rc.evaluate(both, {"x": np.ones(4, np.float32)}, dims={"N": 3, "T": 4}), 7.0)


def test_a_symbolic_constant_is_evaluated_at_the_binding():
    x = rc.input("x", ("T",))
    scaled = x * (1 / dim("T")) + dim("T")
    np.testing.assert_allclose(
        rc.evaluate(scaled, {"x": np.full(4, 2.0, np.float32)}), np.full(4, 2.0 / 4 + 4)
    )
    np.testing.assert_allclose(
        rc.evaluate(scaled, {"x": np.full(5, 1.0, np.float32)}), np.full(5, 1.0 / 5 + 5)
    )


def test_conflicting_bindings_are_errors():
    a, b = rc.input("a", ("T",)), rc.input("b", (2, "T"))
    with pytest.raises(
        rc.BindingError, match=r"dimension T is 3 from input 'a' but 4 from axis 1 of input 'b'"
    ):
        rc.evaluate(a + b, {"a": np.ones(3, np.float32), "b": np.ones((2, 4), np.float32)})
    with pytest.raises(rc.BindingError, match=r"dimension T is 2 from dims= but 3 from axis 0 of input 'a'"):
        rc.evaluate(a, {"a": np.ones(3, np.float32)}, dims={"T": 2})


def test_a_constant_offset_carries_its_multiples_of_the_divisor():
    """A read at fixed indices of two axes (offset 1026 = 1024 + 2) unravels exactly, without an idiv
    left over: the sorting network reads its fields that way."""
    from refcomp.symbolic.simplify import simplify_index
    o = [sympy.Symbol(f"o{k}", integer=True, nonnegative=True) for k in range(3)]
    flat = 512 * o[0] + 4 * o[1] + o[2] + 1026
    bounds = {o[0]: 2, o[1]: 128, o[2]: 2}
    assert simplify_index(idiv(flat, 1024), bounds) == 1
    assert simplify_index(imod(idiv(flat, 2), 2), bounds) == 1
    assert simplify_index(imod(flat, 1024), bounds) == 512 * o[0] + 4 * o[1] + o[2] + 2
