"""`rc.onnx`: ONNX models that import, compile and run.

The importer (refcomp.frontends.onnx) turns a model into refcomp tensors and sits below the driver;
this module, above it, adds what needs the compiler: `OnnxModel.compile` and `OnnxModel.run`.

    m = rc.onnx.import_model("model.onnx", dims={"batch": "B"})
    out = m.run({"x": x}, backend="emulator")                 # generated CUDA, ONNX dtypes back
    out = m.evaluate({"x": x})                                # the NumPy reference
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from .compiler import compile as compile_program
from .exec.program import Program
from .frontends.onnx import MIN_OPSET, ImportedModel, check_defined, check_supported, imported, load  # noqa: F401

__all__ = ["import_model", "load", "OnnxModel", "MIN_OPSET", "check_supported", "check_defined"]


class OnnxModel(ImportedModel):
    """An imported model (see frontends.onnx.ImportedModel) that also compiles and runs."""

    def compile(self, search: bool = True) -> Program:
        """`rc.compile(self.outputs)`, cached per `search` setting."""
        programs = self.__dict__.setdefault("_programs", {})
        if search not in programs:
            programs[search] = compile_program(self.outputs, search=search)
        return programs[search]

    def run(self, feeds: Optional[Mapping[str, object]] = None, backend: Optional[str] = None,
            dims: Optional[Mapping[str, int]] = None, search: bool = True) -> dict[str, np.ndarray]:
        """Every graph output, by the compiled program on `backend` ("emulator", "pycuda" or "numpy")."""
        if backend == "numpy":
            return self.evaluate(feeds, dims)
        merged = self.feeds(feeds)
        results = self.compile(search).run(merged, backend=backend, dims=dims) if self.outputs else {}
        return self._finish(results, merged, dims)


def import_model(model_or_path, dims: Optional[Mapping] = None, constants: Optional[Mapping[str, object]] = None,
                 base_dir=None) -> OnnxModel:
    """Import an ONNX model (a ModelProto, bytes, or a path) of opset 13 or later; see
    refcomp.frontends.onnx.import_model for `dims`, `constants` and `base_dir`."""
    return OnnxModel(imported(load(model_or_path, base_dir), dims, constants))
