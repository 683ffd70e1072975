"""Integer tensors computed from Range with a symbolic length stay symbolic (frontends/onnx_positions.py):
a Gather by them is a view, comparisons and arithmetic read them as exact floats; checked against NumPy
on the reference and the emulator, with binding errors where a view would leave its buffer."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from refcomp import onnx as ro  # noqa: E402
from refcomp.errors import BindingError, RefcompError  # noqa: E402
from refcomp.frontends.onnx_positions import Positions, positions_of  # noqa: E402

RNG = np.random.default_rng(11)


def i64(name, values):
    return nh.from_array(np.asarray(values, np.int64), name)


def build(nodes, inputs, outputs, initializers):
    graph = h.make_graph(nodes, "g", inputs, outputs, initializers)
    return ro.import_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def seq_of(x="x"):
    """Nodes computing seq = x.shape[1] as a scalar, the way exporters write it."""
    return [h.make_node("Shape", [x], ["shape"]), h.make_node("Gather", ["shape", "one"], ["seq"], axis=0)]


def test_position_embeddings_are_a_view_of_the_table():
    """table[Range(0, seq) + 2] added to x, for x of shape (batch, seq, 4): rows 2..seq+1 of the table."""
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    nodes = seq_of() + [h.make_node("Range", ["zero", "seq", "step"], ["pos"]),
                        h.make_node("Add", ["pos", "two"], ["shifted"]),
                        h.make_node("Unsqueeze", ["shifted", "axes0"], ["pos2"]),
                        h.make_node("Gather", ["table", "pos2"], ["emb"], axis=0),
                        h.make_node("Add", ["x", "emb"], ["y"])]
    m = build(
        nodes,
        [h.make_tensor_value_info("x", TP.FLOAT, ["batch", "seq", 4])],
        [h.make_tensor_value_info("y", TP.FLOAT, ["batch", "seq", 4])],
        [
            i64("one", 1),
            i64("zero", 0),
            i64("step", 1),
            i64("two", 2),
            i64("axes0", [0]),
            nh.from_array(table, "table"),
        ],
    )
    assert not any(name.startswith("pos") for name in m.weights)  # no index array was made
    for batch, seq in ((2, 3), (1, 8)):
        x = RNG.standard_normal((batch, seq, 4)).astype(np.float32)
        want = x + table[2:seq + 2][None]
        np.testing.assert_array_equal(m.evaluate({"x": x})["y"], want)
        np.testing.assert_array_equal(m.run({"x": x}, backend="emulator")["y"], want)
    x = RNG.standard_normal((1, 9, 4)).astype(np.float32)  # rows 2..10 of a 10-row table
    with pytest.raises(BindingError):
        m.evaluate({"x": x})
    with pytest.raises(BindingError):
        m.run({"x": x}, backend="emulator")


def test_a_causal_mask_from_compared_ranges():
    """(k <= q) from two ranges broadcast against each other, cast to float, masks scores."""
    nodes = seq_of("s") + [
        h.make_node("Range", ["zero", "seq", "step"], ["r"]),
        h.make_node("Unsqueeze", ["r", "axes1"], ["q"]),
        h.make_node("Unsqueeze", ["r", "axes0"], ["k"]),
        h.make_node("LessOrEqual", ["k", "q"], ["keep"]),
        h.make_node("Cast", ["keep"], ["f"], to=TP.FLOAT),
        h.make_node("Mul", ["s", "f"], ["y"]),
    ]
    m = build(nodes, [h.make_tensor_value_info("s", TP.FLOAT, [2, "seq", "seq"])],
              [h.make_tensor_value_info("y", TP.FLOAT, [2, "seq", "seq"])],
              [i64("one", 1), i64("zero", 0), i64("step", 1), i64("axes0", [0]), i64("axes1", [1])])
    s = RNG.standard_normal((2, 5, 5)).astype(np.float32)
    want = s * np.tril(np.ones((5, 5), np.float32))
    np.testing.assert_array_equal(m.evaluate({"s": s})["y"], want)
    np.testing.assert_array_equal(m.run({"s": s}, backend="emulator")["y"], want)


def test_an_integer_fill_of_symbolic_shape_and_a_sliced_arange_buffer():
    """ConstantOfShape(INT64 7) of shape (seq,) and buffer[:seq] of an arange buffer, gathered from a
    float table and added: rows 7 and 0..seq-1."""
    table = RNG.standard_normal((12, 3)).astype(np.float32)
    fill = h.make_tensor("v", TP.INT64, [1], [7])
    nodes = seq_of() + [
        h.make_node("Unsqueeze", ["seq", "axes0"], ["seq1"]),
        h.make_node("ConstantOfShape", ["seq1"], ["sevens"], value=fill),
        h.make_node("Slice", ["buffer", "zero1", "seq1"], ["ids"]),
        h.make_node("Gather", ["table", "sevens"], ["a"], axis=0),
        h.make_node("Gather", ["table", "ids"], ["b"], axis=0),
        h.make_node("Add", ["a", "b"], ["ab"]),
        h.make_node("Add", ["x", "ab"], ["y"]),
    ]
    m = build(
        nodes,
        [h.make_tensor_value_info("x", TP.FLOAT, [1, "seq", 3])],
        [h.make_tensor_value_info("y", TP.FLOAT, [1, "seq", 3])],
        [
            i64("one", 1),
            i64("axes0", [0]),
            i64("zero1", [0]),
            i64("buffer", np.arange(12)),
            nh.from_array(table, "table"),
        ],
    )
    x = RNG.standard_normal((1, 4, 3)).astype(np.float32)
    want = x + (table[7][None] + table[:4])[None]
    np.testing.assert_allclose(m.evaluate({"x": x})["y"], want, rtol=1e-6)
    np.testing.assert_allclose(m.run({"x": x}, backend="emulator")["y"], want, rtol=1e-6)


def test_positions_algebra():
    p = Positions.arange(5, 2, 1)  # 2, 3, 4, 5, 6
    assert positions_of(np.arange(2, 7)) == p
    assert positions_of(np.array([[0, 1, 2], [10, 11, 12]])) == Positions((2, 3), (10, 1), 0)
    assert positions_of(np.array([0, 1, 3])) is None  # not affine
    q = p.reshaped((1, 5)).expanded((3, 5))
    assert q == Positions((3, 5), (0, 1), 2)
    assert q.plus(Positions((3, 1), (5, 0), 0), (3, 5)) == Positions((3, 5), (5, 1), 2)
    assert q.scaled(3).shifted(-1) == Positions((3, 5), (0, 3), 5)
    assert p.reshaped((5, 2)) is None


def test_a_symbolic_range_needs_a_unit_step():
    nodes = seq_of() + [
        h.make_node("Range", ["zero", "seq", "two"], ["r"]),
        h.make_node("Cast", ["r"], ["f"], to=TP.FLOAT),
        h.make_node("Add", ["x", "f"], ["y"]),
    ]
    with pytest.raises(RefcompError, match="Range.*step of 1 or -1"):
        build(
            nodes,
            [h.make_tensor_value_info("x", TP.FLOAT, [1, "seq"])],
            [h.make_tensor_value_info("y", TP.FLOAT, [1, "seq"])],
            [i64("one", 1), i64("zero", 0), i64("two", 2)],
        )
