"""Frontends: importers that turn models written for other tools into refcomp graphs.

`refcomp.frontends.onnx` imports ONNX models (see docs/onnx.md), `refcomp.frontends.torch_export`
PyTorch models through torch.export (docs/torch.md). They are loaded on first access, so importing
refcomp never imports the `onnx` or `torch` packages.
"""
from __future__ import annotations

import importlib

__all__ = ["onnx", "torch_export"]


def __getattr__(name: str):
    if name in __all__:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
