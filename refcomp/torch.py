"""`rc.torch`: PyTorch models through torch.export, imported, compiled and run.

The importer (refcomp.frontends.torch_export) turns an ExportedProgram into refcomp tensors and
sits below the driver; this module, above it, adds what needs the compiler: `TorchModel.compile`
and `TorchModel.run`. torch itself is imported only when a model is exported.

    B = torch.export.Dim("B", min=1, max=64)
    m = rc.torch.export(net.eval(), (x,), dynamic_shapes={"x": {0: B}})
    out = m.run({"x": x}, backend="emulator")       # generated CUDA; any B in [1, 64]
    out = m.evaluate({"x": x})                      # the NumPy reference
"""
from __future__ import annotations

from typing import Mapping, Optional

from .compiler import CompilingModel
from .frontends.torch_export import ExportedModel, export_program, imported

__all__ = ["export", "import_program", "TorchModel"]


class TorchModel(CompilingModel, ExportedModel):
    """An exported model (see frontends.torch_export.ExportedModel) that also compiles and runs."""


def export(module, args=(), kwargs=None, dynamic_shapes=None, strict: bool = False) -> TorchModel:
    """`torch.export.export(module, args, kwargs, dynamic_shapes=...).run_decompositions()`, imported:
    named Dims keep their names (and ranges), Dim.AUTO ones torch's (s0, ...)."""
    ep, names = export_program(module, args, kwargs, dynamic_shapes, strict)
    return TorchModel(imported(ep, names))


def import_program(ep, names: Optional[Mapping[str, str]] = None) -> TorchModel:
    """An ExportedProgram as it is (decomposed or not); `names` renames torch's dims ({"s0": "B"})."""
    return TorchModel(imported(ep, names))
