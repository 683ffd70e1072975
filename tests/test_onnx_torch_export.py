"""Models exported by torch 2.13's `torch.onnx.export`, by both of its exporters, import into refcomp and
match PyTorch (issue 29): the default dynamo exporter (dynamo=True, which needs onnxscript: the `onnx`
extra installs it) and the TorchScript one (dynamo=False). A small MLP and an nn.TransformerEncoderLayer
(batch_first, eval, dynamic batch); the TorchScript export of the layer casts its head size, a slice of
a shape holding the symbolic batch, to FLOAT, which refcomp once refused as symbolic."""
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install -e '.[onnx]')")
torch = pytest.importorskip("torch", reason="needs torch (pip install -e '.[test]')")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import refcomp as rc  # noqa: E402

try:
    import onnxscript  # noqa: F401 - the dynamo exporter's translator
    HAS_ONNXSCRIPT = True
except ImportError:
    HAS_ONNXSCRIPT = False
EXPORTERS = [
    pytest.param(
        True,
        id="dynamo",
        marks=pytest.mark.skipif(
            not HAS_ONNXSCRIPT,
            reason="torch.onnx.export(dynamo=True), the default, needs onnxscript, which is "
            "missing (pip install -e '.[onnx]')",
        ),
    ),
    pytest.param(False, id="torchscript"),
]


class Encoder(torch.nn.Module):
    """One TransformerEncoderLayer called with the input only: the TorchScript exporter passes a layer's
    defaulted arguments as tensors, and a tensor is_causal breaks scaled_dot_product_attention."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(
            16, 4, dim_feedforward=32, batch_first=True, dropout=0.1
        )

    def forward(self, x):
        return self.layer(x)


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def export(net, example, path, dynamo: bool, axes=("batch",)) -> None:
    """`torch.onnx.export` of `net` (in eval mode) with the named leading axes of input "x" dynamic, each
    exporter told so its own way (torch.export's Dims, the TorchScript exporter's dynamic_axes)."""
    dynamic = (
        {"dynamic_shapes": ({k: torch.export.Dim(name) for k, name in enumerate(axes)},)}
        if dynamo
        else {"dynamic_axes": {"x": dict(enumerate(axes))}}
    )
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice, the exporters' chatter
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (example,), path, input_names=["x"], output_names=["y"], dynamo=dynamo, **dynamic
        )


def _matches_torch(net, path, shapes) -> rc.onnx.OnnxModel:
    model = rc.onnx.import_model(path)
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        got = model.evaluate({"x": x})["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, err_msg=f"{path} at {shape}")
    return model


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_an_exported_mlp_matches_torch_at_two_batch_sizes(tmp_path, dynamo):
    torch.manual_seed(0)
    net = _mlp().eval()
    path = str(tmp_path / "mlp.onnx")
    export(net, torch.randn(3, 8), path, dynamo)
    model = _matches_torch(net, path, [(2, 8), (5, 8)])
    assert [str(n) for n in model.inputs["x"].shape] == ["batch", "8"]


@pytest.mark.parametrize("dynamo", EXPORTERS)
def test_an_exported_transformer_encoder_layer_matches_torch_at_two_batch_sizes(tmp_path, dynamo):
    torch.manual_seed(0)
    net = Encoder().eval()
    path = str(tmp_path / "encoder.onnx")
    export(net, torch.randn(3, 5, 16), path, dynamo)
    model = _matches_torch(net, path, [(2, 5, 16), (4, 5, 16)])
    if not dynamo:  # the export that cast a slice of a symbolic shape to FLOAT
        assert any(n.op_type == "Cast" for n in onnx.load(path).graph.node)
    x = np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float32)
    got = model.run({"x": x}, backend="emulator", search=False)["y"]
    np.testing.assert_allclose(got, model.evaluate({"x": x})["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(
    not HAS_ONNXSCRIPT, reason="the dynamo exporter needs onnxscript (pip install -e '.[onnx]')"
)
def test_the_dynamo_export_of_the_plain_layer_keeps_batch_and_sequence_dynamic(tmp_path):
    """The layer itself (no wrapper) and a dynamic sequence too: the dynamo exporter reads the sizes from the
    input's shape. (The TorchScript exporter writes the example's sequence length as a constant.)"""
    torch.manual_seed(0)
    net = torch.nn.TransformerEncoderLayer(
        16, 2, 32, batch_first=True, activation="gelu", norm_first=True
    ).eval()
    path = str(tmp_path / "layer.onnx")
    export(net, torch.randn(3, 5, 16), path, True, axes=("batch", "seq"))
    _matches_torch(net, path, [(2, 7, 16), (1, 3, 16)])


# --- the Cast, on a hand-built graph (no exporter needed) ---------------------------------------------
def _cast_of_shape_slice(start: int, end: int):
    """y = x / Cast<FLOAT>(Shape(x)[start:end]): the TorchScript export's scaling by the head size."""
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Slice", ["s", "starts", "ends"], ["d"]),
             h.make_node("Cast", ["d"], ["f"], name="scale_cast", to=TP.FLOAT),
             h.make_node("Div", ["x", "f"], ["y"])]
    inits = [
        nh.from_array(np.array([start], np.int64), "starts"),
        nh.from_array(np.array([end], np.int64), "ends"),
    ]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["batch", 4])],
                         [h.make_tensor_value_info("y", TP.FLOAT, ["batch", 4])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_cast_of_concrete_dims_sliced_from_a_symbolic_shape_is_a_constant():
    model = rc.onnx.import_model(_cast_of_shape_slice(-1, 1 << 62))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(model.evaluate({"x": x})["y"], x / 4)


def test_a_cast_of_a_symbolic_dim_to_float_is_refused_naming_the_node():
    with pytest.raises(rc.RefcompError) as raised:
        rc.onnx.import_model(_cast_of_shape_slice(0, 1))
    assert "scale_cast" in str(raised.value) and "symbolic dims [batch]" in str(raised.value)
