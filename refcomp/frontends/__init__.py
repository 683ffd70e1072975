"""Frontends: importers that turn models written for other tools into refcomp graphs.

`refcomp.frontends.onnx` imports ONNX models (see docs/onnx.md). It is loaded on first access, so
importing refcomp never imports the `onnx` package.
"""
from __future__ import annotations

import importlib

__all__ = ["onnx"]


def __getattr__(name: str):
    if name == "onnx":
        module = importlib.import_module(".onnx", __name__)
        globals()["onnx"] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
