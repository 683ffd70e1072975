"""ONNX models in FLOAT16 and BFLOAT16: imported as refcomp's 16-bit storage types (ops/dtypes.py) and
checked against ONNX's reference evaluator and against PyTorch, on the reference and the emulator."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import refcomp as rc

onnx = pytest.importorskip("onnx", reason="the ONNX tests need the onnx package (pip install onnx)")
from onnx import TensorProto as TP, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _mlp_model(etype: int, rng) -> onnx.ModelProto:
    """MatMul, Add, Relu, Softmax in `etype`, then a Cast to FLOAT and a float32 Mul; a symbolic batch."""
    np_type = helper.tensor_dtype_to_np_dtype(etype)
    weight = numpy_helper.from_array(
        (rng.standard_normal((8, 6)) * 0.3).astype(np.float32).astype(np_type), "W"
    )
    bias = numpy_helper.from_array((rng.standard_normal(6) * 0.1).astype(np.float32).astype(np_type), "B")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "B"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Softmax", ["r"], ["s"], axis=-1),
        helper.make_node("Cast", ["s"], ["wide"], to=TP.FLOAT),
        helper.make_node("Mul", ["wide", "x2"], ["z"]),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", etype, ["N", 8]),
                                             helper.make_tensor_value_info("x2", TP.FLOAT, ["N", 6])],
                              [helper.make_tensor_value_info("s", etype, ["N", 6]),
                               helper.make_tensor_value_info("z", TP.FLOAT, ["N", 6])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("etype", [TP.FLOAT16, TP.BFLOAT16], ids=["FLOAT16", "BFLOAT16"])
def test_16_bit_model_matches_onnx_reference_evaluator(etype):
    rng = np.random.default_rng(0)
    model = _mlp_model(etype, rng)
    np_type = helper.tensor_dtype_to_np_dtype(etype)
    imported = rc.onnx.import_model(model)
    assert imported.input_types == {"x": TP.DataType.Name(etype), "x2": "FLOAT"}
    one_ulp = 2.0 ** -10 if etype == TP.FLOAT16 else 2.0 ** -7
    for n in (1, 5):
        feeds = {
            "x": rng.standard_normal((n, 8)).astype(np.float32).astype(np_type),
            "x2": rng.standard_normal((n, 6)).astype(np.float32),
        }
        want_s, want_z = ReferenceEvaluator(model).run(None, feeds)
        for backend in ("numpy", "emulator"):
            got = imported.run(feeds, backend=backend)
            assert got["s"].dtype == want_s.dtype and got["z"].dtype == np.float32  # ONNX's types back
            s = got["s"].astype(np.float32)
            # softmax's primitives each round to the 16-bit type; the evaluator rounds its result once
            np.testing.assert_allclose(s, want_s.astype(np.float32), rtol=2 * one_ulp, atol=one_ulp / 8)
            np.testing.assert_allclose(got["z"], s * feeds["x2"], rtol=1e-6)


def test_pytorch_exported_half_model_matches_pytorch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = (
        torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
        )
        .half()
        .eval()
    )
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.randn(3, 8).half(),), buffer, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "B"}}, dynamo=False)
    model = rc.onnx.import_model(buffer.getvalue())
    for batch in (2, 7):
        x = torch.randn(batch, 8).half()
        with torch.no_grad():
            want = net(x).float().numpy()
        for backend in ("numpy", "emulator"):
            got = model.run({"x": x.numpy()}, backend=backend)["y"]
            assert got.dtype == np.float16
            # layer norm's and GELU's primitives each round (PyTorch rounds each module's output once)
            np.testing.assert_allclose(got.astype(np.float32), want, rtol=4e-3, atol=2e-3)
