"""Models of older opsets: imported as they are where every operator means what it means at opset 13,
converted by onnx.version_converter otherwise (with one warning), and checked against the old
opset's meaning written in NumPy; all unsupported operators in one error; the models onnx ships."""
import glob
import os
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from refcomp import onnx as ro  # noqa: E402
from refcomp.errors import RefcompError  # noqa: E402
from refcomp.frontends.onnx_load import MIN_OPSET, OpsetConverted  # noqa: E402
from refcomp.onnx_backend import RefcompBackend  # noqa: E402

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=None):
    m = h.make_model(
        h.make_graph(nodes, "g", inputs, outputs, list(initializers)),
        opset_imports=[h.make_opsetid("", opset)],
    )
    if ir_version is not None:
        m.ir_version = ir_version
    return m


def vi(name, shape, etype=TP.FLOAT):
    return h.make_tensor_value_info(name, etype, shape)


def imported_quietly(m):
    with warnings.catch_warnings():
        warnings.simplefilter("error", OpsetConverted)
        return ro.import_model(m)


def test_an_old_opset_of_unchanged_operators_imports_as_it_is():
    m = model(
        [h.make_node("Relu", ["x"], ["r"], name="relu"), h.make_node("Sigmoid", ["r"], ["y"], name="sig")],
        [vi("x", [2, 3])],
        [vi("y", [2, 3])],
        opset=6,
    )
    imported = imported_quietly(m)  # no conversion, so no warning
    assert imported.opset == 6
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(
        imported.evaluate({"x": x})["y"], 1 / (1 + np.exp(-np.maximum(x, 0))), rtol=1e-6
    )


def test_a_changed_operator_is_converted_once_and_keeps_its_old_meaning():
    # Softmax at opset 11 flattens the input at `axis` into a matrix: axis=0 is one softmax over all six
    # values, where opset 13's axis=0 would normalise each column
    m = model(
        [h.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)],
        [vi("x", [2, 3])],
        [vi("y", [2, 3])],
        opset=11,
    )
    with pytest.warns(OpsetConverted, match=f"opset 11: converted to opset {MIN_OPSET}") as record:
        imported = ro.import_model(m)
    assert len(record) == 1 and imported.opset == MIN_OPSET
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]], np.float32)
    e = np.exp(x.astype(np.float64) - x.max())
    np.testing.assert_allclose(imported.evaluate({"x": x})["y"], e / e.sum(), rtol=1e-5)
    np.testing.assert_allclose(imported.run({"x": x}, backend="emulator")["y"], e / e.sum(), rtol=1e-5)


def test_opset_6_prelu_slopes_stay_per_channel_and_ir_3_initializers_are_inputs():
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    m = model(
        [h.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")],
        [vi("x", [2, 3, 4]), vi("slope", [3])],
        [vi("y", [2, 3, 4])],
        [nh.from_array(slope, "slope")],
        opset=6,
        ir_version=3,
    )
    with pytest.warns(OpsetConverted):
        imported = ro.import_model(m)
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4)
    want = np.where(x < 0, x * slope[None, :, None], x)  # opset 6: a slope per channel (axis 1)
    np.testing.assert_allclose(imported.evaluate({"x": x})["y"], want, rtol=1e-6)


def test_every_unsupported_operator_is_named_in_one_error():
    nodes = [
        h.make_node("Shrink", ["x"], ["a"], name="s1"),
        h.make_node("StringNormalizer", ["t"], ["u"], name="norm"),
        h.make_node("Relu", ["a"], ["b"], name="ok"),
        h.make_node("Shrink", ["b"], ["c"], name="s2"),
    ]
    nodes[0].op_type = nodes[3].op_type = "NotAnOp"
    m = model(nodes, [vi("x", [2]), vi("t", [2], TP.STRING)], [vi("c", [2]), vi("u", [2], TP.STRING)])
    with pytest.raises(RefcompError) as info:
        ro.import_model(m)
    message = str(info.value)
    for fragment in ("2 operators", "NotAnOp (2 nodes: 's1', 's2')", "StringNormalizer (1 node: 'norm')"):
        assert fragment in message, message
    assert "Relu" not in message


SHIPPED = sorted(glob.glob(os.path.join(DATA, "pytorch-converted", "test_*")))


def _read(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return nh.to_array(t)


def _check_shipped(model_dir, device):
    rep = RefcompBackend.prepare(onnx.load(os.path.join(model_dir, "model.onnx")), device)
    for data in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
        got = rep.run([_read(p) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")))])
        wanted = [_read(p) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")))]
        assert len(got) == len(wanted)
        for value, want in zip(got, wanted):
            np.testing.assert_allclose(
                np.asarray(value, np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-5
            )


@pytest.mark.filterwarnings("ignore::refcomp.frontends.onnx_load.OpsetConverted")
def test_every_shipped_pytorch_converted_model_matches_its_outputs_on_the_reference():
    assert len(SHIPPED) == 82
    for model_dir in SHIPPED:
        _check_shipped(model_dir, "CPU")


@pytest.mark.filterwarnings("ignore::refcomp.frontends.onnx_load.OpsetConverted")
@pytest.mark.parametrize("name", ["test_Conv2d", "test_PReLU_2d_multiparam", "test_Softmax", "test_GLU_dim"])
def test_shipped_models_match_on_the_emulator(name):
    _check_shipped(os.path.join(DATA, "pytorch-converted", name), "CUDA")
