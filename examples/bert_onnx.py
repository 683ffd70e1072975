"""A random-init Hugging Face BERT exported to ONNX with dynamic axes, imported by refcomp and
compared with PyTorch at two (batch, seq) sizes on the NumPy reference and the host emulator.

    python examples/bert_onnx.py
"""
import os
import sys

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples.hf_onnx import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("bert"))
