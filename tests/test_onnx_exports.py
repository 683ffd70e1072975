"""Hugging Face BERT and GPT-2 (random init) exported by torch.onnx.export with dynamic batch and
sequence axes: imported once, they match PyTorch at two sizes on the reference and the emulator, and a
sequence longer than the position table is refused as a binding error, never read out of bounds."""
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="needs the onnx package (pip install -e '.[onnx]')")
pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[models]')")

import refcomp as rc  # noqa: E402
from refcomp.errors import BindingError  # noqa: E402

try:
    from examples.hf_onnx import POSITIONS, check, export, inputs
except ModuleNotFoundError:  # plain `pytest` with refcomp installed: examples/ is not a package on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.hf_onnx import POSITIONS, check, export, inputs


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_exported_model_matches_torch_at_two_sizes(tmp_path, kind):
    path = str(tmp_path / f"{kind}.onnx")
    net = export(kind, path)
    errors = check(kind, path, net, sizes=((2, 7), (3, 12)))
    assert len(errors) == 4
    for where, err in errors.items():
        assert err < 2e-5, (where, err)
    imported = rc.onnx.import_model(path)
    assert {str(d) for d in imported.inputs["input_ids"].shape} == {"batch", "seq"}
    assert (
        imported.inputs["attention_mask"].dtype == "float32"
    )  # an int64 mask only cast to float is read as float
    ids, mask = inputs(1, POSITIONS + 1)
    with pytest.raises(BindingError):  # the position table has 64 rows
        imported.evaluate({"input_ids": ids, "attention_mask": mask})
    with pytest.raises(BindingError):
        imported.run({"input_ids": ids, "attention_mask": mask}, backend="emulator")
