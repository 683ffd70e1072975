"""Every failure a user can cause while importing an ONNX model is a RefcompError naming the node
(name and op type), the tensor or the file at fault: never a NumPy, Python or onnx exception."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
from onnx import TensorProto as TP  # noqa: E402
from onnx import external_data_helper  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import refcomp as rc  # noqa: E402
from refcomp.errors import RefcompError  # noqa: E402
from refcomp import onnx as ro  # noqa: E402
from refcomp.frontends.onnx_ops_core import MAX_FOLD_ELEMENTS  # noqa: E402


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def vi(name, shape=(), etype=TP.FLOAT):
    return h.make_tensor_value_info(name, etype, list(shape))


def ints(name, values):
    return nh.from_array(np.array(values, np.int64), name)


def one_node(op, inputs, initializers, out_type=TP.INT64, name="bad", graph_inputs=(), **attrs):
    return model(
        [h.make_node(op, inputs, ["y"], name=name, **attrs)],
        list(graph_inputs),
        [vi("y", (), out_type)],
        initializers,
    )


def refused(m, *fragments, **kwargs) -> str:
    """Import m, expect a RefcompError whose message holds every fragment, and return the message."""
    with pytest.raises(RefcompError) as info:
        ro.import_model(m, **kwargs)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# --- 1. arrays folded at import time are bounded -------------------------------------------------
@pytest.mark.parametrize("shape, says", [
    ([2 ** 20, 2 ** 20, 2 ** 10], ["1,125,899,906,842,624 elements", "4.0 PiB"]),   # 4 PiB of float32
    ([2 ** 40, 2 ** 40], ["1,208,925,819,614,629,174,706,176 elements"]),           # overflows int64
    ([-3, 4], ["negative dimension"]),
])
def test_constant_of_shape_too_big_or_negative_names_the_node_and_the_cost(shape, says):
    m = one_node("ConstantOfShape", ["shape"], [ints("shape", shape)], TP.FLOAT, name="fill")
    message = refused(m, "ConstantOfShape", "'fill'", *says)
    if "negative" not in message:
        assert f"{MAX_FOLD_ELEMENTS:,}" in message


@pytest.mark.parametrize(
    "op, inputs, initializers, says",
    [
        (
            "Range",
            ["s", "l", "d"],
            [ints("s", 0), ints("l", 2**62), ints("d", 1)],
            "4,611,686,018,427,387,904 elements",
        ),
        ("Expand", ["x", "s"], [ints("x", [1, 2]), ints("s", [2**30, 2**30, 2])], "elements"),
        ("Tile", ["x", "r"], [ints("x", [1, 2]), ints("r", [2**40])], "16.0 TiB"),
        ("Pad", ["x", "p"], [ints("x", [1, 2]), ints("p", [0, 2**40])], "8.0 TiB"),
        ("Add", ["a", "b"], [ints("a", np.zeros((2**16, 1))), ints("b", np.zeros((1, 2**16)))], "32.0 GiB"),
        (
            "Gather",
            ["x", "i"],
            [ints("x", np.zeros((1, 2**12))), ints("i", np.zeros(2**13))],
            "33,554,432 elements",
        ),
    ],
)
def test_every_import_time_fold_is_bounded(op, inputs, initializers, says):
    refused(one_node(op, inputs, initializers), op, "'bad'", says, "MAX_FOLD_ELEMENTS")


def test_float_range_with_an_infinite_limit_names_the_node():
    floats = [nh.from_array(np.array(v, np.float32), n) for v, n in ((0, "s"), (np.inf, "l"), (1, "d"))]
    refused(one_node("Range", ["s", "l", "d"], floats, TP.FLOAT), "Range", "'bad'", "finite")


# --- 2. onnx's validation and loading errors are wrapped -----------------------------------------
def _truncated_initializer():
    w = nh.from_array(np.arange(6, dtype=np.float32), "w")
    w.raw_data = w.raw_data[:-3]
    return model([h.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [6])], [vi("y", [6])], [w])


def _bad_elem_type():
    w = nh.from_array(np.arange(6, dtype=np.float32), "w")
    w.data_type = 99
    return model([h.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [6])], [vi("y", [6])], [w])


def _relu(**kw):
    return model([h.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])], **kw)


def _extra_domain():
    m = _relu()
    m.opset_import.append(h.make_opsetid("com.unknown", 1))
    return m


def _only_unknown_domain():
    m = _relu()
    del m.opset_import[:]
    m.opset_import.append(h.make_opsetid("com.unknown", 1))
    return m


def _no_ir_version():
    m = _relu()
    m.ir_version = 0
    return m


MALFORMED = {
    "missing required attribute": (
        lambda: model([h.make_node("Concat", ["x", "x"], ["y"], name="cat")], [vi("x", [2])], [vi("y", [4])]),
        ["Concat", "'cat'", "Required attribute 'axis'"],
    ),
    "unnamed node, missing attribute": (
        lambda: model([h.make_node("Cast", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])]),
        ["Cast", "#0 (output 'y')", "'to'"],
    ),
    "wrong attribute type": (
        lambda: model(
            [h.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.5)], [vi("x", [2])], [vi("y", [2])]
        ),
        ["Softmax", "'sm'", "Expected: 'INT'"],
    ),
    "too many inputs": (
        lambda: model([h.make_node("Relu", ["x", "x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])]),
        ["Relu", "'r'", "input size 2"],
    ),
    "op not in the declared opset": (
        lambda: model([h.make_node("Gelu", ["x"], ["y"], name="ge")], [vi("x", [2])], [vi("y", [2])]),
        ["Gelu", "'ge'", "No Op registered"],
    ),
    "inconsistent raw_data": (
        _truncated_initializer,
        ["the ONNX model", "tensor name: w", "24 bytes required"],
    ),
    "undefined elem_type": (_bad_elem_type, ["initializer 'w'", "element type type#99"]),
    "empty model": (onnx.ModelProto, ["the ONNX model has no graph outputs"]),
    "empty bytes": (lambda: b"", ["the ONNX bytes"]),
    "only an unknown domain": (
        _only_unknown_domain,
        ["the ONNX model", "no opset of the default ONNX domain"],
    ),
    "no ir_version": (_no_ir_version, ["the ONNX model is malformed", "ir_version"]),
    "duplicate output names": (
        lambda: model(
            [h.make_node("Relu", ["x"], ["y"], name="r1"), h.make_node("Relu", ["x"], ["y"], name="r2")],
            [vi("x", [2])],
            [vi("y", [2])],
        ),
        ["Relu", "'r2'", "output 'y' is already produced"],
    ),
    "duplicate graph inputs": (
        lambda: model(
            [h.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2]), vi("x", [2])], [vi("y", [2])]
        ),
        ["the ONNX model is malformed", "'x'", "graph input"],
    ),
    "string initializer": (
        lambda: model(
            [h.make_node("Identity", ["w"], ["y"], name="id")],
            [],
            [vi("y", [1], TP.STRING)],
            [h.make_tensor("w", TP.STRING, [1], [b"a"])],
        ),
        ["initializer 'w'", "STRING"],
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_models_raise_refcomp_error_naming_the_node_tensor_or_model(case):
    build, says = MALFORMED[case]
    refused(build(), *says)


def test_an_unused_opset_of_an_unknown_domain_is_accepted():
    assert list(ro.import_model(_extra_domain()).outputs) == ["y"]


def _external(tmp_path, location, **keys):
    w = nh.from_array(np.arange(6, dtype=np.float32), "w")
    external_data_helper.set_external_data(w, location, **keys)
    w.ClearField("raw_data")
    w.data_location = TP.EXTERNAL
    path = tmp_path / "m.onnx"
    path.write_bytes(
        model(
            [h.make_node("Add", ["x", "w"], ["y"], name="add")], [vi("x", [6])], [vi("y", [6])], [w]
        ).SerializeToString()
    )
    return path


@pytest.mark.parametrize("location, keys, says", [
    ("missing.bin", {}, "not regular file"),
    ("../outside.bin", {}, "points outside the directory"),
    ("data.bin", {"offset": 100}, "exceeds file size"),
    ("data.bin", {"length": 8}, "24 bytes required"),
])
def test_external_data_errors_name_the_file_and_the_tensor(tmp_path, location, keys, says):
    (tmp_path / "data.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    path = _external(tmp_path, location, **keys)
    refused(str(path), "m.onnx", "w", says)


def test_external_data_inside_the_directory_loads(tmp_path):
    (tmp_path / "data.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    m = ro.import_model(str(_external(tmp_path, "data.bin")))
    np.testing.assert_array_equal(m.weights["w"], np.arange(6, dtype=np.float32))


# --- 3. undefined and out-of-order tensors -------------------------------------------------------
def test_an_undefined_input_is_called_undefined_not_unsorted():
    m = model([h.make_node("Add", ["x", "nowhere"], ["y"], name="adder")], [vi("x", [2])], [vi("y", [2])])
    message = refused(m, "Add", "'adder'", "'nowhere'", "undefined")
    assert "topologically" not in message


def test_an_input_produced_by_a_later_node_says_so():
    m = model(
        [h.make_node("Relu", ["t"], ["y"], name="second"), h.make_node("Neg", ["x"], ["t"], name="first")],
        [vi("x", [2])],
        [vi("y", [2])],
    )
    refused(m, "Relu", "'second'", "'t'", "produced by a later node", "Neg", "'first'")


def test_an_undefined_graph_output_is_named():
    m = model([h.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2]), vi("z", [2])])
    refused(m, "graph output 'z'", "undefined")


# --- 4. no recursion on graph depth --------------------------------------------------------------
def test_a_chain_of_ten_thousand_nodes_imports_and_evaluates():
    nodes, prev = [], "x"
    for i in range(10_000):
        op = "Add" if i % 2 == 0 else "Relu"
        nodes.append(h.make_node(op, [prev, prev] if op == "Add" else [prev], [f"t{i}"], name=f"n{i}"))
        prev = f"t{i}"
    m = ro.import_model(model(nodes, [vi("x", [3])], [vi(prev, [3])]))
    out = rc.evaluate(m.outputs, m.feeds({"x": np.array([0.0, -1.0, 2.0 ** -126], np.float32)}))[prev]
    np.testing.assert_array_equal(
        out, [0.0, 0.0, np.inf]
    )  # 5,000 doublings overflow; the first Relu zeroes -2


# --- everything else the importer meets: still a RefcompError naming the node --------------------
OTHER = {
    "static reshape mismatch": (
        lambda: one_node("Reshape", ["d", "s"], [ints("d", np.arange(6)), ints("s", [5])]),
        ["Reshape", "'bad'", "(6,) to [5]"],
    ),
    "static concat mismatch": (
        lambda: one_node(
            "Concat", ["a", "b"], [ints("a", np.zeros((2, 2))), ints("b", np.zeros((3, 3)))], axis=0
        ),
        ["Concat", "'bad'", "do not concatenate"],
    ),
    "static broadcast mismatch": (
        lambda: one_node("Add", ["a", "b"], [ints("a", [1, 2]), ints("b", [1, 2, 3])]),
        ["Add", "'bad'", "do not broadcast"],
    ),
    "integer division by zero": (
        lambda: one_node("Div", ["a", "b"], [ints("a", [1, 2]), ints("b", [1, 0])]),
        ["Div", "'bad'", "division by zero"],
    ),
    "Celu alpha 0": (
        lambda: one_node("Celu", ["x"], [], TP.FLOAT, graph_inputs=[vi("x", [2])], alpha=0.0),
        ["Celu", "'bad'", "alpha"],
    ),
    "Gather on a scalar": (
        lambda: one_node("Gather", ["x", "i"], [ints("i", [0])], TP.FLOAT, graph_inputs=[vi("x")]),
        ["Gather", "'bad'", "scalar"],
    ),
    "Squeeze axes of a scalar": (
        lambda: one_node("Squeeze", ["x", "a"], [ints("a", [0])], TP.FLOAT, graph_inputs=[vi("x")]),
        ["Squeeze", "'bad'", "scalar"],
    ),
    "Split num_outputs=0": (
        lambda: model(
            [h.make_node("Split", ["x"], ["a", "b"], name="bad", num_outputs=0)],
            [vi("x", [6])],
            [vi("a", [3]), vi("b", [3])],
            opset=18,
        ),
        ["Split", "'bad'", "num_outputs"],
    ),
    "Dropout with an empty training_mode": (
        lambda: model(
            [h.make_node("Dropout", ["x", "", "t"], ["y"], name="bad")],
            [vi("x", [2])],
            [vi("y", [2])],
            [nh.from_array(np.zeros(0, bool), "t")],
        ),
        ["Dropout", "'bad'", "training_mode"],
    ),
    "Constant holding a STRING": (
        lambda: model(
            [
                h.make_node(
                    "Constant", [], ["y"], name="bad", value=h.make_tensor("c", TP.STRING, [1], [b"a"])
                )
            ],
            [],
            [vi("y", [1], TP.STRING)],
        ),
        ["Constant", "'bad'", "STRING"],
    ),
    "matmul shape mismatch from refcomp's Tensor op": (
        lambda: one_node(
            "MatMul",
            ["x", "w"],
            [nh.from_array(np.ones((3, 2), np.float32), "w")],
            TP.FLOAT,
            graph_inputs=[vi("x", [2, 4])],
        ),
        ["ONNX MatMul node 'bad'", "inner dimensions"],
    ),
}


@pytest.mark.parametrize("case", sorted(OTHER))
def test_other_user_errors_name_the_node(case):
    build, says = OTHER[case]
    refused(build(), *says)


def test_bad_dims_and_constants_arguments_name_the_input():
    m = model(
        [h.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
        [vi("x", ["N", 2]), vi("s", [1], TP.INT64)],
        [vi("y", [-1])],
    )
    refused(m, "dims['x']", "must be a shape", dims={"x": "abc"})
    refused(m, "dims['x']", "rank 3", dims={"x": (1, 2, 3)})
    refused(m, "dims['N']", "graph input 'x'", dims={"N": 2.5})
    refused(m, "constants['s']", "numeric", constants={"s": "abc"})
