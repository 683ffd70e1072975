"""`rc.onnx`: ONNX models that import, compile and run.

The importer (refcomp.frontends.onnx) turns a model into refcomp tensors and sits below the driver;
this module, above it, adds what needs the compiler: `OnnxModel.compile` and `OnnxModel.run`.

    m = rc.onnx.import_model("model.onnx", dims={"batch": "B"})
    out = m.run({"x": x}, backend="emulator")                 # generated CUDA, ONNX dtypes back
    out = m.evaluate({"x": x})                                # the NumPy reference
"""
from __future__ import annotations

from typing import Mapping, Optional

from .compiler import CompilingModel
from .frontends.onnx import MIN_OPSET, ImportedModel, check_defined, check_supported, imported, load  # noqa: F401

__all__ = ["import_model", "load", "OnnxModel", "MIN_OPSET", "check_supported", "check_defined"]


class OnnxModel(CompilingModel, ImportedModel):
    """An imported model (see frontends.onnx.ImportedModel) that also compiles and runs."""


def import_model(
    model_or_path,
    dims: Optional[Mapping] = None,
    constants: Optional[Mapping[str, object]] = None,
    base_dir=None,
) -> OnnxModel:
    """Import an ONNX model (a ModelProto, bytes, or a path) of opset 13 or later; see
    refcomp.frontends.onnx.import_model for `dims`, `constants` and `base_dir`."""
    return OnnxModel(imported(load(model_or_path, base_dir), dims, constants))
