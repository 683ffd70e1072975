"""Every bad input raises a subclass of rc.RefcompError whose message names what is at fault.

Each test asserts the error class and the pieces of the message a user needs: the input's name,
the shapes, the dimension and its conflicting values.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import refcomp as rc


def raises(cls, *fragments):
    """pytest.raises for `cls` whose message contains every fragment (plain text, not regexes)."""
    return pytest.raises(cls, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


def test_every_error_class_is_a_refcomp_error():
    for cls in (rc.ShapeError, rc.BindingError, rc.FeedError):
        assert issubclass(cls, rc.RefcompError)
    assert issubclass(rc.RefcompError, Exception)


# --- shapes at build time ------------------------------------------------------------------------

@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a + b,
        lambda a, b: a * b,
        lambda a, b: a - b,
        lambda a, b: a / b,
        lambda a, b: a < b,
        lambda a, b: rc.maximum(a, b),
        lambda a, b: a % b,
        lambda a, b: a**b,
        lambda a, b: rc.minimum(a, b),
        lambda a, b: a <= b,
        lambda a, b: a == b,
        lambda a, b: a != b,
        lambda a, b: rc.fmod(a, b),
        lambda a, b: a > b,
        lambda a, b: a >= b,
    ],
)
def test_binary_shape_mismatch_names_both_shapes(op):
    x, y = rc.input("x", (3, 4)), rc.input("y", (5,))
    with raises(rc.ShapeError, "input 'x'", "(3, 4)", "input 'y'", "(5,)", "4 vs 5"):
        op(x, y)


def test_symbolic_shape_mismatch_names_the_dims():
    a, b = rc.input("a", ("T", 2)), rc.input("b", ("S", 2))
    with raises(rc.ShapeError, "input 'a'", "(T, 2)", "input 'b'", "(S, 2)", "T vs S"):
        a + b


def test_matmul_inner_dim_mismatch():
    x, w = rc.input("x", (3, 4)), rc.input("w", (3, 2))
    with raises(rc.ShapeError, "inner dimensions", "input 'x'", "has 4", "input 'w'", "has 3"):
        x @ w
    with raises(rc.ShapeError, "matmul", "batch", "2 vs 3"):
        rc.input("p", (2, 3, 4)) @ rc.input("q", (3, 4, 5))
    with raises(rc.ShapeError, "at least 1-D"):
        x @ 2.0


@pytest.mark.parametrize(
    "call, bad",
    [
        (lambda x: x.sum(2), "axis 2"),
        (lambda x: x.max(-3), "axis -3"),
        (lambda x: x.softmax(5), "axis 5"),
        (lambda x: x.mean((0, 7)), "axis 7"),
        (lambda x: x.transpose(0, 2), "axis 2"),
        (lambda x: x.unsqueeze(4), "axis 4"),
        (lambda x: x.squeeze(-3), "axis -3"),
        (lambda x: x.flip(2), "axis 2"),
        (lambda x: x.cumsum(3), "axis 3"),
        (lambda x: x.argmax(2), "axis 2"),
        (lambda x: rc.concat([x, x], axis=2), "axis 2"),
        (lambda x: rc.stack([x, x], axis=4), "axis 4"),
        (lambda x: x.sum(1.0), "axis 1.0"),
    ],
)
def test_bad_axis(call, bad):
    with raises(rc.ShapeError, bad, "input 'x'", "(3, 4)"):
        call(rc.input("x", (3, 4)))


def test_repeated_axis():
    with raises(rc.ShapeError, "repeated axis", "input 'x'"):
        rc.input("x", (3, 4)).sum((1, -1))


def test_reshape_of_the_wrong_size():
    x = rc.input("x", (3, 4))
    with raises(rc.ShapeError, "input 'x'", "(5, 2)", "12", "10"):
        x.reshape(5, 2)
    with raises(rc.ShapeError, "input 'x'", "12", "5"):
        x.reshape(-1, 5)
    with raises(rc.ShapeError, "input 'x'", "one -1"):
        x.reshape(-1, -1)
    with raises(rc.ShapeError, "input 'x'", "negative"):
        x.reshape(-2, -6)
    t = rc.input("t", ("T", 4))
    with raises(rc.ShapeError, "input 't'", "4*T", "3"):
        t.reshape(-1, 3)
    with raises(rc.ShapeError, "input 't'", "4*T", "3*T", "do not divide"):
        t.reshape(-1, t.shape[0] * 3)
    with raises(rc.ShapeError, "input 't'", "4*T", "8*T"):
        t.reshape(t.shape[0], 8)


def test_bad_permute():
    x = rc.input("x", (2, 3, 4))
    with raises(rc.ShapeError, "permute", "input 'x'", "(0, 0, 1)", "3 axes"):
        x.permute(0, 0, 1)
    with raises(rc.ShapeError, "permute", "input 'x'", "(1, 0)"):
        x.permute(1, 0)
    with raises(rc.ShapeError, "axis 3", "input 'x'"):
        x.permute(0, 1, 3)


def test_bad_movement_arguments():
    x = rc.input("x", (3, 4))
    assert x.squeeze(0).shape == (3, 4)  # PyTorch keeps an axis of another size
    with raises(rc.ShapeError, "squeeze", "input 'y'", "symbolic length B"):
        rc.input("y", ("B", 4)).squeeze(0)
    with raises(rc.ShapeError, "input 'x'", "(3, 5)", "axis 1 is 4"):
        x.expand(3, 5)
    with raises(rc.ShapeError, "expand", "input 'x'", "fewer axes"):
        x.expand(4)
    with raises(rc.ShapeError, "expand", "input 'x'", "leading"):
        x.expand(-1, 3, 4)
    with raises(rc.ShapeError, "pad", "input 'x'", "pair per axis"):
        x.pad([(1, 1)])
    with raises(rc.ShapeError, "pad", "input 'x'", "negative", "axis 1"):
        x.pad([(0, 0), (-1, 0)])
    with raises(rc.ShapeError, "index 3", "axis 0", "input 'x'"):
        x[3]
    with raises(rc.ShapeError, "index -5", "axis 1", "input 'x'"):
        x[:, -5]
    with raises(rc.ShapeError, "3 indices", "2 axes", "input 'x'"):
        x[0, 0, 0]
    with raises(rc.ShapeError, "one ellipsis"):
        x[..., 0, ...]
    with raises(rc.ShapeError, "step 0"):
        x[::0]
    with raises(rc.ShapeError, "'a'", "input 'x'"):
        x["a"]
    with raises(rc.ShapeError, "input 'x'", "truth value"):
        bool(x)
    with raises(rc.ShapeError, "concat", "input 'y'", "input 'x'"):
        rc.concat([x, rc.input("y", (3, 5))], axis=0)
    with raises(rc.ShapeError, "at least one"):
        rc.concat([])
    t = rc.input("t", ("T",))
    with raises(rc.ShapeError, "symbolic axis", "input 't'", "negative steps"):
        t[2::-1]


def test_bad_inputs_and_operands():
    with raises(rc.ShapeError, "input 'bad'", "-1", "negative"):
        rc.input("bad", (3, -1))
    with raises(rc.ShapeError, "3.5"):
        rc.input("bad", (3.5,))
    with raises(rc.ShapeError, "'1x'", "identifier"):
        rc.input("bad", ("1x",))
    with raises(rc.ShapeError, "input 'bad'", "uint8", "float16"):  # the message lists what works
        rc.input("bad", (3,), "uint8")
    with raises(rc.ShapeError, "non-empty"):
        rc.input("", (3,))
    with raises(rc.ShapeError, "True", "bool"):
        rc.input("bad", (True,))
    x = rc.input("x", (3,))
    with raises(rc.ShapeError, "str", "'a'"):
        x + "a"
    with raises(rc.ShapeError, "ndarray"):
        x + np.ones(3, np.float32)
    with raises(rc.ShapeError, "arange", "step"):
        rc.arange(0, 5, 0)
    with raises(rc.ShapeError, "arange(0, [5], 1)", "numbers"):
        rc.arange(0, [5])
    assert rc.evaluate(rc.arange(1.5), {}).tolist() == [0.0, 1.0]  # floats as torch.arange takes them


def test_int32_tensors_compute_as_pytorchs_and_refuse_what_it_refuses():
    import torch
    ids = rc.input("ids", (4,), "int32")
    values = np.array([2**31 - 1, -5, 3, 0], np.int32)
    for op in (lambda t: t + 1.0, lambda t: 2.0 * t, lambda t: t.exp(), lambda t: t.sum(), lambda t: t.amax(),
               lambda t: t < 1, lambda t: t.sqrt(), lambda t: -t, lambda t: t * t, lambda t: t // -2):
        got, want = rc.evaluate(op(ids), {"ids": values}), op(torch.tensor(values)).numpy()
        assert got.dtype == want.dtype or want.dtype == np.bool_, (got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=0 if got.dtype.kind == "i" else 1e-6)  # exp: an ulp
    with raises(rc.ShapeError, "mean of input 'ids'", "float tensors only"):
        ids.mean()
    table = rc.input("table", (5, 3))
    with raises(rc.ShapeError, "embedding ids", "input 'table'", "float32"):
        rc.nn.embedding(table, table)
    with raises(rc.ShapeError, "embedding table", "2-D", "input 'flat'"):
        rc.nn.embedding(ids, rc.input("flat", (5,)))


def test_nn_argument_errors():
    img = rc.input("img", (1, 3, 5, 5))
    with raises(rc.ShapeError, "conv2d", "input 'img'", "3 channels", "input 'k'", "4 x 1"):
        rc.nn.conv2d(img, rc.input("k", (2, 4, 3, 3)))
    with raises(rc.ShapeError, "conv2d", "input 'img'", "3 channels", "2 x 2 groups"):
        rc.nn.conv2d(img, rc.input("k", (2, 2, 3, 3)), groups=2)
    with raises(rc.ShapeError, "conv2d", "3 output channels", "2 groups"):
        rc.nn.conv2d(rc.input("img4", (1, 4, 5, 5)), rc.input("k", (3, 2, 3, 3)), groups=2)
    with raises(rc.ShapeError, "conv2d", "input 'img'", "height 5", "extent 7"):
        rc.nn.conv2d(img, rc.input("k", (2, 3, 4, 1)), dilation=2)
    with raises(rc.ShapeError, "conv2d weight", "4-D", "input 'k'"):
        rc.nn.conv2d(img, rc.input("k", (2, 3, 3)))
    with raises(rc.ShapeError, "conv2d", "4-D", "input 'flat'"):
        rc.nn.conv2d(rc.input("flat", (3, 5, 5)), rc.input("k", (2, 3, 3, 3)))
    with raises(rc.ShapeError, "stride", "-1"):
        rc.nn.conv2d(img, rc.input("k", (2, 3, 3, 3)), stride=-1)
    with raises(rc.ShapeError, "positive"):
        rc.nn.conv2d(img, rc.input("k", (2, 3, 3, 3)), stride=0)
    with raises(rc.ShapeError, "groups", "0"):
        rc.nn.conv2d(img, rc.input("k", (2, 3, 3, 3)), groups=0)
    with raises(rc.ShapeError, "max_pool2d", "padding (2, 2)", "kernel (2, 2)"):
        rc.nn.max_pool2d(img, 2, padding=2)
    with raises(rc.ShapeError, "linear weight", "2-D", "input 'w'"):
        rc.nn.linear(rc.input("x", (2, 4)), rc.input("w", (4,)))
    with raises(rc.ShapeError, "inner dimensions", "input 'w'"):
        rc.nn.linear(rc.input("x", (2, 4)), rc.input("w", (3, 5)))


# --- binding and feeding at evaluation time ------------------------------------------------------

def test_unbound_dim():
    with raises(rc.BindingError, "dimension N", "unbound", "dims="):
        rc.evaluate(rc.arange("N"), {})
    t = rc.input("t", ("T",))
    with raises(rc.BindingError, "dimension S", "unbound"):
        rc.evaluate(t.sum() + rc.arange("S").sum(), {"t": ones(3)})
    with raises(rc.BindingError, "dimension T", "unbound"):
        rc.evaluate(rc.constant(1.0).broadcast_to(("T",)), {})


def test_conflicting_dims_between_two_feeds():
    a, b = rc.input("a", ("B", "T")), rc.input("b", ("T",))
    with raises(rc.BindingError, "dimension T", "3", "input 'a'", "4", "axis 0", "input 'b'"):
        rc.evaluate(a + b, {"a": ones(2, 3), "b": ones(4)})


def test_conflicting_dims_between_a_feed_and_dims():
    a = rc.input("a", ("T", 2))
    with raises(rc.BindingError, "dimension T", "5", "dims=", "3", "axis 0", "input 'a'"):
        rc.evaluate(a, {"a": ones(3, 2)}, dims={"T": 5})
    # agreeing values are fine
    np.testing.assert_array_equal(rc.evaluate(a, {"a": ones(3, 2)}, dims={"T": 3}), ones(3, 2))


def test_bad_dims_values():
    a = rc.input("a", ("T",))
    with raises(rc.BindingError, "dims['T']", "-1"):
        rc.evaluate(a, {"a": ones(3)}, dims={"T": -1})
    with raises(rc.BindingError, "dims['T']", "2.0"):
        rc.evaluate(a, {"a": ones(3)}, dims={"T": 2.0})


def test_wrong_feed_shape():
    x = rc.input("x", (3, 4))
    with raises(rc.FeedError, "input 'x'", "size 4", "axis 1", "(3, 5)"):
        rc.evaluate(x, {"x": ones(3, 5)})
    with raises(rc.FeedError, "input 'x'", "2 axes", "(3,)"):
        rc.evaluate(x, {"x": ones(3)})
    s = rc.input("s", ("B", 4))
    with raises(rc.FeedError, "input 's'", "2 axes", "('B', '4')", "(2, 4, 1)"):
        rc.evaluate(s, {"s": ones(2, 4, 1)})
    with raises(rc.FeedError, "input 's'", "size 4", "axis 1"):
        rc.evaluate(s, {"s": ones(2, 3)})


def test_wrong_feed_dtype():
    x = rc.input("x", (3,))
    with raises(rc.FeedError, "input 'x'", "float32", "int64"):
        rc.evaluate(x, {"x": np.arange(3)})
    with raises(rc.FeedError, "input 'x'", "float32", "bool"):
        rc.evaluate(x, {"x": np.ones(3, bool)})
    with raises(rc.FeedError, "input 'x'", "float32", "<U"):
        rc.evaluate(x, {"x": np.array(["a", "b", "c"])})
    ids = rc.input("ids", (3,), "int32")
    with raises(rc.FeedError, "input 'ids'", "int32", "float32"):
        rc.evaluate(ids, {"ids": ones(3)})
    with raises(rc.FeedError, "input 'ids'", "int32"):
        rc.evaluate(ids, {"ids": np.array([0, 1, 2**40])})


def test_missing_and_unknown_feeds():
    x, y = rc.input("x", (3,)), rc.input("y", (3,))
    with raises(rc.FeedError, "input 'y'", "not fed", "'x'"):
        rc.evaluate(x + y, {"x": ones(3)})
    with raises(rc.FeedError, "feed 'z'", "no input", "'x'", "'y'"):
        rc.evaluate(x + y, {"x": ones(3), "y": ones(3), "z": ones(3)})
    with raises(rc.FeedError, "dict", "list"):
        rc.evaluate(x, [ones(3)])


def test_two_inputs_with_one_name():
    a, b = rc.input("x", (3, 4)), rc.input("x", (4,))
    with raises(rc.RefcompError, "'x'", "(3, 4) float32", "(4,) float32"):
        rc.evaluate(a + b, {"x": ones(3, 4)})


def test_embedding_id_out_of_range():
    ids, table = rc.input("ids", (2, 3), "int32"), rc.input("table", (5, 2))
    out = rc.nn.embedding(ids, table)
    with raises(rc.FeedError, "input 'ids'", "[0, 5)", "input 'table'", "7"):
        rc.evaluate(out, {"ids": np.array([[0, 1, 7], [2, 3, 4]], np.int32), "table": ones(5, 2)})
    with raises(rc.FeedError, "input 'ids'", "[0, 5)", "-1"):
        rc.evaluate(out, {"ids": np.array([[0, 1, 2], [2, -1, 4]], np.int32), "table": ones(5, 2)})


def test_symbolic_slice_out_of_range_for_a_binding():
    t = rc.input("t", ("T",))
    with raises(rc.BindingError, "input 't'", "T=4", "out of range"):
        rc.evaluate(t[:10], {"t": ones(4)})
    with raises(rc.BindingError, "input 't'", "T - 3", "T=2"):
        rc.evaluate(t[3:], {"t": ones(2)})
    np.testing.assert_array_equal(rc.evaluate(t[3:], {"t": np.arange(5, dtype=np.float32)}), [3.0, 4.0])


def test_bad_evaluate_arguments():
    x = rc.input("x", (3,))
    with raises(rc.RefcompError, "precision", "float16"):
        rc.evaluate(x, {"x": ones(3)}, precision="float16")
    with raises(rc.RefcompError, "outputs", "int"):
        rc.evaluate(3, {})
    with raises(rc.RefcompError, "output 'b'", "float"):
        rc.evaluate({"a": x, "b": 1.0}, {"x": ones(3)})
    with raises(rc.RefcompError, "output 1", "str"):
        rc.evaluate([x, "y"], {"x": ones(3)})


# Sizes PyTorch refuses (the oracle: torch raises on the same call), refcomp refuses with a ShapeError
# naming the problem: a negative dimension once made a tensor of shape (2, -1), and a non-finite arange
# end an OverflowError from deep inside.
REFUSED_LIKE_TORCH = [
    ("zeros(2, -1)", "negative dimension"),
    ("ones(-1)", "negative dimension"),
    ("full((2, -3), 1.0)", "negative dimension"),
    ("eye(-1)", "negative"),
    ("rand(2, -2)", "negative dimension"),
    ("randn(-2)", "negative dimension"),
    ("arange(0, float('inf'))", "finite"),
    ("arange(float('-inf'), 0)", "finite"),
    ("arange(0, float('nan'))", "finite"),
    ("arange(0, 5, float('nan'))", "NaN"),
]


@pytest.mark.parametrize("call, fragment", REFUSED_LIKE_TORCH)
def test_sizes_pytorch_refuses_are_shape_errors(call, fragment):
    torch = pytest.importorskip("torch")
    with pytest.raises(Exception):
        eval(f"torch.{call}", {"torch": torch})  # noqa: S307  (a literal of this test, not input)
    with raises(rc.ShapeError, fragment):
        eval(f"rc.{call}", {"rc": rc})  # noqa: S307


def test_expand_refuses_a_negative_size_other_than_minus_one():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.zeros(1, 3).expand(-2, 3)
    with raises(rc.ShapeError, "negative dimension"):
        rc.input("x", (1, 3)).expand(-2, 3)
    np.testing.assert_array_equal(  # -1 keeps the axis, as torch's expand
        rc.evaluate(rc.input("y", (1, 3)).expand(2, -1), {"y": np.arange(3, dtype=np.float32)[None]}),
        torch.arange(3.0)[None].expand(2, -1).numpy(),
    )


def test_a_pytorch_method_refcomp_lacks_is_an_unsupported_error_naming_it():
    """Every public name of torch.Tensor that refcomp's Tensor lacks (the oracle: torch's own list):
    a RefcompError that is also an AttributeError, so hasattr and getattr's default still work."""
    torch = pytest.importorskip("torch")
    x = rc.input("x", (3, 4))
    missing = [n for n in dir(torch.Tensor) if not n.startswith("_") and not hasattr(x, n)]
    assert {"item", "numpy", "backward", "zero_"} <= set(missing)
    for name in missing:
        with raises(rc.UnsupportedError, f"no {name!r}", "input 'x'"):
            getattr(x, name)
        assert getattr(x, name, None) is None
    with raises(rc.UnsupportedError, "rc.evaluate"):
        x.item()
    with pytest.raises(AttributeError) as private:
        x._no_such_thing  # noqa: B018  (private names stay Python's own AttributeError)
    assert not isinstance(private.value, rc.RefcompError)


def test_a_torch_nn_functional_name_rc_nn_lacks_is_an_unsupported_error():
    torch = pytest.importorskip("torch")
    missing = [n for n in dir(torch.nn.functional) if not n.startswith("_") and not hasattr(rc.nn, n)]
    assert {"nll_loss", "pixel_shuffle"} <= set(missing)
    for name in missing:
        with raises(rc.UnsupportedError, f"rc.nn has no {name!r}"):
            getattr(rc.nn, name)


@pytest.mark.parametrize("shape", [None, 3.5, {2: 3}])
def test_an_input_shape_that_is_no_sequence_is_a_shape_error(shape):
    with raises(rc.ShapeError, "input 'x'", "tuple of dims"):
        rc.input("x", shape)


def test_an_input_shape_may_be_any_sequence_of_dims():
    assert rc.input("x", np.array([2, 3])).shape == (2, 3)
    assert rc.input("y", [2, "B"]).shape[0] == 2


@pytest.mark.parametrize("op", ["<<", ">>"])
def test_bit_shifts_are_refused_saying_why(op):
    """A TypeError from Python ('unsupported operand') before: no operator was defined."""
    env = {"x": rc.input("x", (3,), "int32")}
    with raises(rc.ShapeError, "bit shift", "input 'x'"):
        eval(f"x {op} 1", env)  # noqa: S307  (the literal operators above)
    with raises(rc.ShapeError, "bit shift"):
        eval(f"1 {op} x", env)  # noqa: S307


def test_python_reads_of_a_lazy_value_say_so_and_len_is_torchs():
    """float(t), int(t), t as a list index and a format spec were TypeErrors from Python; len(t) too,
    where torch gives the first axis's length."""
    torch = pytest.importorskip("torch")
    x = rc.input("x", (3, 4))
    assert len(x) == len(torch.zeros(3, 4)) == 3
    for read in (float, int, complex, lambda t: [1, 2][t], lambda t: format(t, ".2f")):
        with raises(rc.ShapeError, "input 'x'", "lazy", "rc.evaluate"):
            read(x)
    with raises(rc.ShapeError, "len()", "known length"):
        len(rc.input("s", ("B", 4)))
    assert f"{x}" == repr(x)
