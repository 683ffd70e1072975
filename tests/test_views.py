"""Property tests of movement ops: every chain of views must read exactly what NumPy's own ops read.

A chain is a list of op descriptions. Each description is applied twice: to an `rc.input` (building
a ViewStack) and to a NumPy array (with NumPy's slicing, transpose, reshape, pad, ...). The values
are distinct positive integers, so a wrong index, a lost mask (0 from padding) or a wrong offset
shows up as a mismatch; comparison is exact.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refcomp as rc
from refcomp.symbolic.dims import evaluate_dim

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _values(shape) -> np.ndarray:
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + 1).reshape(shape)


# --- op descriptions, applied to both sides -----------------------------------------------------
# Every op is a tuple whose first item names it; `apply_rc` and `apply_np` give it meaning.

def apply_rc(t: rc.Tensor, op) -> rc.Tensor:
    kind = op[0]
    if kind == "permute":
        return t.permute(op[1])
    if kind == "transpose":
        return t.transpose(op[1], op[2])
    if kind == "T":
        return t.T
    if kind == "reshape":
        return t.reshape(op[1](t.shape))
    if kind == "expand":
        return t.expand(*op[1](t.shape))
    if kind == "broadcast_to":
        return t.broadcast_to(op[1](t.shape))
    if kind == "getitem":
        return t[op[1]]
    if kind == "pad":
        return t.pad(op[1], value=op[2])
    if kind == "flip":
        return t.flip(op[1])
    if kind == "unsqueeze":
        return t.unsqueeze(op[1])
    if kind == "squeeze":
        return t.squeeze(op[1])
    if kind == "window":
        lead, n, w = t.shape[:-1], t.shape[-1], op[1]
        lead_strides = _contiguous_strides(lead + (n,))[:-1]
        return t.as_strided(lead + (n - w + 1, w), lead_strides + (1, 1))
    if kind == "contiguous":
        return t.contiguous()
    raise AssertionError(op)


def apply_np(x: np.ndarray, op) -> np.ndarray:
    return np.asarray(_apply_np(np.asarray(x), op))


def _apply_np(x: np.ndarray, op) -> np.ndarray:
    kind = op[0]
    if kind == "permute":
        return np.transpose(x, op[1])
    if kind == "transpose":
        return np.swapaxes(x, op[1], op[2])
    if kind == "T":
        return x.T
    if kind == "reshape":
        return x.reshape(op[1](x.shape))
    if kind == "expand":
        shape = op[1](x.shape)
        lead = len(shape) - x.ndim
        return np.broadcast_to(x, tuple(x.shape[i - lead] if n == -1 else n for i, n in enumerate(shape)))
    if kind == "broadcast_to":
        return np.broadcast_to(x, op[1](x.shape))
    if kind == "getitem":
        return x[op[1]]
    if kind == "pad":
        return np.pad(x, op[1], constant_values=op[2]) if x.ndim else x
    if kind == "flip":
        return np.flip(x, op[1])
    if kind == "unsqueeze":
        return np.expand_dims(x, op[1])
    if kind == "squeeze":
        return np.squeeze(x, op[1])
    if kind == "window":
        return np.lib.stride_tricks.sliding_window_view(np.ascontiguousarray(x), op[1], axis=-1)
    if kind == "contiguous":
        return x.copy()
    raise AssertionError(op)


def _contiguous_strides(shape):
    strides, running = [], 1
    for n in reversed(shape):
        strides.append(running)
        running = running * n
    return tuple(reversed(strides))


# --- strategies ------------------------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def concrete_op(draw, shape: tuple[int, ...]):
    """One movement op valid for a concrete `shape`, and the shape after it."""
    ndim = len(shape)
    kinds = ["reshape_any", "getitem", "pad", "flip", "unsqueeze", "contiguous"]
    if ndim:
        kinds += ["permute", "transpose", "T", "merge", "split", "window"]
    if any(n == 1 for n in shape) or ndim < 4:
        kinds += ["expand"]
    if any(n == 1 for n in shape):
        kinds += ["squeeze"]
    kind = draw(st.sampled_from(kinds))
    if kind == "permute":
        return ("permute", tuple(draw(st.permutations(range(ndim)))))
    if kind == "transpose":
        return ("transpose", draw(st.integers(-ndim, ndim - 1)), draw(st.integers(-ndim, ndim - 1)))
    if kind == "T":
        return ("T",)
    if kind == "merge":
        if ndim < 2:
            return ("reshape", lambda s: (-1,))
        a = draw(st.integers(0, ndim - 2))
        return ("reshape", lambda s, a=a: tuple(s[:a]) + (-1,) + tuple(s[a + 2:]))
    if kind == "split":
        a = draw(st.integers(0, ndim - 1))
        f = draw(st.sampled_from(_divisors(shape[a])))
        use_minus_one = draw(st.booleans())
        return (
            "reshape",
            lambda s, a=a, f=f, m=use_minus_one: (
                tuple(s[:a]) + ((f, -1) if m else (f, s[a] // f)) + tuple(s[a + 1 :])
            ),
        )
    if kind == "reshape_any":
        total, factors = int(np.prod(shape)), []
        rest = total
        for _ in range(draw(st.integers(0, 3))):
            f = draw(st.sampled_from(_divisors(rest)))
            factors.append(f)
            rest //= f
        factors.append(rest)
        factors = draw(st.permutations(factors))
        if draw(st.booleans()):
            factors = list(factors)
            factors[draw(st.integers(0, len(factors) - 1))] = -1
        new = tuple(factors)
        return ("reshape", lambda s, new=new: new)
    if kind == "expand":
        ones = [i for i, n in enumerate(shape) if n == 1]
        target = [(draw(st.integers(1, 4)) if i in ones and draw(st.booleans()) else -1) for i in range(ndim)]
        lead = tuple(draw(st.lists(st.integers(1, 3), max_size=max(0, 4 - ndim))))
        if draw(st.booleans()):
            return ("expand", lambda s, t=tuple(lead) + tuple(target): t)
        return (
            "broadcast_to",
            lambda s, t=tuple(target), lead=lead: lead + tuple(n if m == -1 else m for n, m in zip(s, t)),
        )
    if kind == "getitem":
        return ("getitem", draw(index_for(shape)))
    if kind == "pad":
        widths = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(ndim))
        value = draw(st.sampled_from([0.0, 0.0, -7.0, 0.5]))
        return ("pad", widths, value)
    if kind == "flip":
        if ndim == 0 or draw(st.booleans()):
            return ("flip", None)
        return ("flip", draw(st.integers(-ndim, ndim - 1)))
    if kind == "unsqueeze":
        return ("unsqueeze", draw(st.integers(-ndim - 1, ndim)))
    if kind == "squeeze":
        return ("squeeze", draw(st.sampled_from([i for i, n in enumerate(shape) if n == 1])))
    if kind == "window":
        return ("window", draw(st.integers(1, shape[-1])))
    return ("contiguous",)


def _index_item(draw, n: int):
    choice = draw(st.sampled_from(["int", "slice", "slice"]))
    if choice == "int":
        return draw(st.integers(-n, n - 1))
    bound = st.none() | st.integers(-n - 2, n + 2)
    step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2, -3]))
    return slice(draw(bound), draw(bound), step)


@st.composite
def index_for(draw, shape):
    """A NumPy basic index: ints (negative too), slices with any step, None and at most one Ellipsis.

    Items index a prefix of the axes and, after an Ellipsis, a suffix of them.
    """
    ndim = len(shape)
    prefix = draw(st.integers(0, ndim))
    items = [_index_item(draw, n) for n in shape[:prefix]]
    if draw(st.booleans()):
        suffix = draw(st.integers(0, ndim - prefix))
        items += [Ellipsis] + [_index_item(draw, n) for n in shape[ndim - suffix:]]
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return tuple(items) if len(items) != 1 or draw(st.booleans()) else items[0]


@st.composite
def chain(draw, op_strategy=concrete_op):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    ops, current = [], _values(shape)
    for _ in range(draw(st.integers(1, 6))):
        if current.size > 4096 or current.size == 0:
            break
        op = draw(op_strategy(current.shape))
        current = apply_np(current, op)
        ops.append(op)
    return shape, ops


@settings(max_examples=200, **SETTINGS)
@given(chain())
def test_random_view_chains_match_numpy(case):
    shape, ops = case
    t, expected = rc.input("x", shape), _values(shape)
    for op in ops:
        t, expected = apply_rc(t, op), apply_np(expected, op)
        assert tuple(t.shape) == expected.shape, (op, t.shape, expected.shape)
    got = rc.evaluate(t, {"x": _values(shape)})
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


# --- symbolic dims ---------------------------------------------------------------------------
# Ops whose meaning does not depend on the bound value: full slices with steps, [1:], [:-1],
# int 0 / -1, merges (sizes taken from `.shape`), splits of int axes, pads, flips, permutes,
# expansion of size-1 axes. The chain is drawn against the smaller binding and checked at both.

SMALL, LARGE = 3, 5


@st.composite
def symbolic_op(draw, shape: tuple[int, ...], symbolic_axes: tuple[bool, ...]):
    ndim = len(shape)
    kinds = ["pad", "flip", "unsqueeze"]
    if ndim:
        kinds += ["permute", "merge", "getitem"]
    if any(n == 1 and not s for n, s in zip(shape, symbolic_axes)):
        kinds += ["expand"]
    if any(not s and n > 1 for n, s in zip(shape, symbolic_axes)):
        kinds += ["split"]
    kind = draw(st.sampled_from(kinds))
    if kind == "permute":
        order = tuple(draw(st.permutations(range(ndim))))
        return ("permute", order), tuple(symbolic_axes[a] for a in order)
    if kind == "merge":
        if ndim < 2:
            return ("reshape", lambda s: (-1,)), (any(symbolic_axes),)
        a = draw(st.integers(0, ndim - 2))
        explicit = draw(st.booleans())  # the merged size from `.shape` products, or -1
        op = (
            "reshape",
            lambda s, a=a, e=explicit: (
                tuple(s[:a]) + ((s[a] * s[a + 1],) if e else (-1,)) + tuple(s[a + 2 :])
            ),
        )
        return op, symbolic_axes[:a] + (symbolic_axes[a] or symbolic_axes[a + 1],) + symbolic_axes[a + 2:]
    if kind == "split":
        a = draw(
            st.sampled_from([i for i, (n, s) in enumerate(zip(shape, symbolic_axes)) if not s and n > 1])
        )
        f = draw(st.sampled_from(_divisors(shape[a])))
        op = ("reshape", lambda s, a=a, f=f: tuple(s[:a]) + (f, s[a] // f) + tuple(s[a + 1:]))
        return op, symbolic_axes[:a] + (False, False) + symbolic_axes[a + 1:]
    if kind == "expand":
        a = draw(
            st.sampled_from([i for i, (n, s) in enumerate(zip(shape, symbolic_axes)) if n == 1 and not s])
        )
        size = draw(st.integers(2, 4))
        return (
            "expand",
            lambda s, a=a, size=size: tuple(size if i == a else -1 for i in range(len(s))),
        ), symbolic_axes
    if kind == "pad":
        widths = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(ndim))
        return ("pad", widths, draw(st.sampled_from([0.0, 3.5]))), symbolic_axes
    if kind == "flip":
        return ("flip", None if ndim == 0 else draw(st.integers(0, ndim - 1))), symbolic_axes
    if kind == "unsqueeze":
        a = draw(st.integers(0, ndim))
        return ("unsqueeze", a), symbolic_axes[:a] + (False,) + symbolic_axes[a:]
    a = draw(st.integers(0, ndim - 1))
    n, sym = shape[a], symbolic_axes[a]
    if not sym:
        item = draw(
            st.integers(-n, n - 1)
            | st.builds(
                slice,
                st.none() | st.integers(0, n),
                st.none() | st.integers(-n, n),
                st.sampled_from([None, 1, 2, -1, -2]),
            )
        )
    else:
        choices = [slice(None, None, 2), slice(None, None, -1), slice(None, None, -2), 0, -1]
        if n > 2:
            choices += [slice(1, None), slice(None, -1), slice(1, None, 2)]
        item = draw(st.sampled_from(choices))
    index = (slice(None),) * a + (item,)
    new_axes = symbolic_axes[:a] + symbolic_axes[a + 1:] if isinstance(item, int) else symbolic_axes
    return ("getitem", index), new_axes


@st.composite
def symbolic_chain(draw):
    ndim = draw(st.integers(1, 4))
    symbolic_axes = tuple(draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim)))
    if not any(symbolic_axes):
        symbolic_axes = (True,) + symbolic_axes[1:]
    sizes = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    spec = tuple("T" if s else n for s, n in zip(symbolic_axes, sizes))
    current = _values(tuple(SMALL if s else n for s, n in zip(symbolic_axes, sizes)))
    ops, axes = [], symbolic_axes
    for _ in range(draw(st.integers(1, 6))):
        if current.size > 2048 or current.size == 0:
            break
        op, axes = draw(symbolic_op(current.shape, axes))
        current = apply_np(current, op)
        ops.append(op)
    return spec, ops


@settings(max_examples=100, **SETTINGS)
@given(symbolic_chain())
def test_random_symbolic_view_chains_match_numpy_at_two_bindings(case):
    spec, ops = case
    t = rc.input("x", spec)
    for op in ops:
        t = apply_rc(t, op)
    for T in (SMALL, LARGE):
        shape = tuple(T if n == "T" else n for n in spec)
        expected = _values(shape)
        for op in ops:
            expected = apply_np(expected, op)
        got = rc.evaluate(t, {"x": _values(shape)})
        np.testing.assert_array_equal(got, expected, err_msg=f"T={T} ops={ops}")
        assert tuple(evaluate_dim(n, {"T": T}) for n in t.shape) == expected.shape


def test_symbolic_shapes_are_reported_as_expressions():
    t = rc.input("x", ("B", "T", 4))
    assert str(t.reshape(t.shape[0] * t.shape[1], 4).shape[0]) == "B*T"
    assert str(t[:, 1:].shape[1]) == "T - 1"
    assert t.T.shape[2] == t.shape[0]
    assert t.flip(1).shape == t.shape
