"""ONNX Einsum, Trilu, CumSum, GatherElements and Shrink on FLOAT data (ONNX's own node tests for
the first three use DOUBLE or INT64 data, outside refcomp's scope), against NumPy written here, on the
reference and the emulator; and the exporter's symbolic reshape chain."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from refcomp import onnx as ro  # noqa: E402
from refcomp.errors import RefcompError  # noqa: E402

RNG = np.random.default_rng(3)


def one_node(op, inputs, shapes, out_shape, initializers=(), **attrs):
    node = h.make_node(op, [n for n in inputs], ["y"], name=op.lower(), **attrs)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info(n, TP.FLOAT, s) for n, s in shapes.items()],
                         [h.make_tensor_value_info("y", TP.FLOAT, out_shape)], list(initializers))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def both(model, feeds, want, rtol=1e-5, atol=1e-6):
    m = ro.import_model(model)
    np.testing.assert_allclose(m.evaluate(feeds)["y"], want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(m.run(feeds, backend="emulator")["y"], want, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "equation,shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
        ("...ii->...i", [(2, 3, 3)]),
        ("ij->", [(3, 4)]),
        ("i,i", [(5,), (5,)]),
        ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ],
)
def test_einsum(equation, shapes):
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    names = [f"x{i}" for i in range(len(shapes))]
    want = np.einsum(equation, *[a.astype(np.float64) for a in arrays])
    model = one_node("Einsum", names, dict(zip(names, shapes)), list(want.shape), equation=equation)
    both(model, dict(zip(names, arrays)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("upper,k", [(1, 0), (1, 2), (0, -1), (0, 3)])
def test_trilu(upper, k):
    x = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    x[0, 1, 1] = np.inf  # a masked-out infinity is 0, not NaN
    kk = nh.from_array(np.array(k, np.int64), "k")
    want = np.triu(x, k) if upper else np.tril(x, k)
    both(one_node("Trilu", ["x", "k"], {"x": [2, 4, 5]}, [2, 4, 5], [kk], upper=upper), {"x": x}, want)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    x[1, 2] = np.inf  # exclusive sums before it stay finite
    axis = nh.from_array(np.array(1, np.int64), "axis")
    d = x.astype(np.float64)[:, ::-1] if reverse else x.astype(np.float64)
    s = np.cumsum(d, axis=1)
    if exclusive:
        s = np.concatenate([np.zeros((3, 1)), s[:, :-1]], axis=1)
    want = s[:, ::-1] if reverse else s
    both(
        one_node(
            "CumSum", ["x", "axis"], {"x": [3, 6]}, [3, 6], [axis], exclusive=exclusive, reverse=reverse
        ),
        {"x": x},
        want,
    )


def test_gather_elements_with_static_indices():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[0, 3, -1], [2, 2, 0], [1, -4, 3]], np.int64)
    want = np.take_along_axis(x, np.where(idx < 0, idx + 4, idx), axis=1)
    both(
        one_node("GatherElements", ["x", "i"], {"x": [3, 4]}, [3, 3], [nh.from_array(idx, "i")], axis=1),
        {"x": x},
        want,
    )
    bad = np.array([[0, 4, 0], [0, 0, 0], [0, 0, 0]], np.int64)
    with pytest.raises(RefcompError, match="GatherElements.*out of range"):
        ro.import_model(
            one_node("GatherElements", ["x", "i"], {"x": [3, 4]}, [3, 3], [nh.from_array(bad, "i")], axis=1)
        )


def test_shrink():
    x = np.linspace(-2, 2, 9, dtype=np.float32)
    want = np.where(x < -0.5, x + 1.5, np.where(x > 0.5, x - 1.5, 0.0))
    both(one_node("Shrink", ["x"], {"x": [9]}, [9], bias=1.5, lambd=0.5), {"x": x}, want)


def test_exported_symbolic_reshape_chain(tmp_path):
    """x.reshape(x.shape[0], -1) as torch.onnx.export writes it with a dynamic batch: Shape -> Gather
    (a scalar index) -> Unsqueeze -> Concat -> Reshape, folded symbolically."""
    torch = pytest.importorskip("torch", reason="needs torch to export")

    class Flatten(torch.nn.Module):
        def forward(self, x):
            return x.reshape(x.shape[0], -1) * 2.0

    path = tmp_path / "flatten.onnx"
    torch.onnx.export(Flatten(), (torch.randn(2, 3, 4),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False, opset_version=17)
    m = ro.import_model(str(path))
    assert str(m.outputs["y"].shape[0]) == "batch"
    for batch in (1, 5):
        x = RNG.standard_normal((batch, 3, 4)).astype(np.float32)
        np.testing.assert_array_equal(m.evaluate({"x": x})["y"], x.reshape(batch, -1) * 2)


def test_an_int64_mask_cast_to_float_is_read_as_float():
    """attention_mask (INT64, dynamic dims) -> Unsqueeze -> Cast(FLOAT) -> (1 - m) * -1e4 + scores -> Softmax,
    as exporters write it; a mask value beyond 2^24 is refused at the feed."""
    nodes = [
        h.make_node("Unsqueeze", ["mask", "ax"], ["m1"]),
        h.make_node("Cast", ["m1"], ["mf"], to=TP.FLOAT),
        h.make_node("Sub", ["one", "mf"], ["inv"]),
        h.make_node("Mul", ["inv", "big"], ["bias"]),
        h.make_node("Add", ["x", "bias"], ["s"]),
        h.make_node("Softmax", ["s"], ["y"], axis=-1),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [
            h.make_tensor_value_info("x", TP.FLOAT, ["B", 3, "T"]),
            h.make_tensor_value_info("mask", TP.INT64, ["B", "T"]),
        ],
        [h.make_tensor_value_info("y", TP.FLOAT, ["B", 3, "T"])],
        [
            nh.from_array(np.array([1], np.int64), "ax"),
            nh.from_array(np.array(1.0, np.float32), "one"),
            nh.from_array(np.array(-1e4, np.float32), "big"),
        ],
    )
    m = ro.import_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    assert m.input_types["mask"] == "INT64" and m.inputs["mask"].dtype == "float32"
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
    s = x.astype(np.float64) + (1 - mask[:, None, :]) * -1e4
    e = np.exp(s - s.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(m.evaluate({"x": x, "mask": mask})["y"], want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        m.run({"x": x, "mask": mask}, backend="emulator")["y"], want, rtol=1e-5, atol=1e-7
    )
    with pytest.raises(RefcompError, match="mask.*2\\^24"):
        m.evaluate({"x": x, "mask": mask * (1 << 25)})
    with pytest.raises(RefcompError, match="mask.*INT64"):
        m.evaluate({"x": x, "mask": mask.astype(np.float32)})


@pytest.mark.parametrize(
    "op,keepdims,last", [("ArgMax", 1, 0), ("ArgMin", 0, 0), ("ArgMax", 0, 1), ("ArgMin", 1, 1)]
)
def test_argmax_argmin_return_int64(op, keepdims, last):
    x = np.array([[3.0, 7.0, 7.0, -1.0], [2.0, -5.0, 9.0, -5.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    out_shape = [3, 1] if keepdims else [3]
    node = h.make_node(op, ["x"], ["y"], name="arg", axis=1, keepdims=keepdims, select_last_index=last)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                         [h.make_tensor_value_info("y", TP.INT64, out_shape)])
    m = ro.import_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    pick = np.argmax if op == "ArgMax" else np.argmin
    want = 3 - pick(x[:, ::-1], axis=1) if last else pick(x, axis=1)
    want = want.reshape(out_shape)
    for got in (m.evaluate({"x": x})["y"], m.run({"x": x}, backend="emulator")["y"]):
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_gather_nd_and_scatter_nd_with_static_indices():
    data = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    idx = np.array([[0, 1], [2, 3], [1, 0]], np.int64)
    model = one_node("GatherND", ["x", "i"], {"x": [3, 4, 2]}, [3, 2], [nh.from_array(idx, "i")])
    both(model, {"x": data}, data[idx[:, 0], idx[:, 1]])
    updates = RNG.standard_normal((3, 2)).astype(np.float32)
    dup = np.array([[0, 1], [2, 3], [0, 1]], np.int64)
    want = data.copy()
    for (a, b), u in zip(dup, updates):
        want[a, b] += u
    model = one_node(
        "ScatterND",
        ["x", "i", "u"],
        {"x": [3, 4, 2], "u": [3, 2]},
        [3, 4, 2],
        [nh.from_array(dup, "i")],
        reduction="add",
    )
    both(model, {"x": data, "u": updates}, want)
    with pytest.raises(RefcompError, match="ScatterND.*twice"):
        ro.import_model(one_node("ScatterND", ["x", "i", "u"], {"x": [3, 4, 2], "u": [3, 2]}, [3, 4, 2],
                                 [nh.from_array(dup, "i")]))
