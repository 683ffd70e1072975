"""ONNX RNN/GRU/LSTM unrolled over time: torch.nn's own modules exported to ONNX match PyTorch on the
reference and the emulator (ONNX's node tests check the operator definitions too); a symbolic
sequence length is refused with a clear error."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
torch = pytest.importorskip("torch", reason="needs torch to export the modules")

from refcomp import onnx as ro  # noqa: E402
from refcomp.errors import RefcompError  # noqa: E402


@pytest.mark.parametrize("kind,bidirectional", [("LSTM", False), ("GRU", True), ("RNN", False)])
def test_torch_recurrent_modules_match(tmp_path, kind, bidirectional):
    torch.manual_seed(0)
    net = getattr(torch.nn, kind)(
        input_size=5, hidden_size=4, batch_first=True, bidirectional=bidirectional
    ).eval()
    x = torch.randn(2, 6, 5)
    path = str(tmp_path / f"{kind}.onnx")
    with torch.no_grad():
        want = net(x)[0].numpy()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net, (x,), path, input_names=["x"], output_names=["y"], opset_version=17, dynamo=False
        )
    m = ro.import_model(path)
    feeds = {"x": x.numpy()}
    np.testing.assert_allclose(m.evaluate(feeds)["y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.run(feeds, backend="emulator")["y"], want, rtol=1e-5, atol=1e-6)


def test_a_symbolic_sequence_length_is_refused(tmp_path):
    net = torch.nn.GRU(input_size=3, hidden_size=2).eval()
    path = str(tmp_path / "gru.onnx")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            net,
            (torch.randn(4, 1, 3),),
            path,
            input_names=["x"],
            output_names=["y"],
            opset_version=17,
            dynamo=False,
            dynamic_axes={"x": {0: "seq"}},
        )
    with pytest.raises(RefcompError, match="GRU.*sequence length is seq.*dims="):
        ro.import_model(path)
    fixed = ro.import_model(path, dims={"seq": 4})  # fixing the length unrolls it
    assert fixed.outputs["y"].shape[0] == 4
