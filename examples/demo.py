"""The refcomp demo: one GPT-2-style block, from builder code to CUDA to a checked result.

    python examples/demo.py [--backend emulator|pycuda]

It compiles the block (symbolic batch and length) with the search on, lists the kernels the search
chose next to the plain one-kernel-per-op lowering, prints a snippet of the generated CUDA, runs the
program on the default backend (a GPU through PyCUDA when one is usable, otherwise refcomp's host
emulator) and checks it against an independent float64 NumPy implementation.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import refcomp as rc  # noqa: E402
from examples.gpt2_block import build_block, numpy_block  # noqa: E402
from refcomp.exec.backends import default_backend  # noqa: E402

TOLERANCE = 2e-4


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="compile, run and check a GPT-2-style block")
    parser.add_argument(
        "--backend", default=None, help="emulator or pycuda (default: pycuda if usable, else emulator)"
    )
    args = parser.parse_args(argv)
    backend = args.backend or default_backend()

    out, weights = build_block()
    plain = rc.compile(out, search=False)
    start = time.perf_counter()
    prog = rc.compile(out, dims_hint={"B": 8, "T": 128})
    print(f"GPT-2 block (D=128, 4 heads, symbolic B and T): {len(plain.kernels)} kernels unfused, "
          f"{len(prog.kernels)} after search ({time.perf_counter() - start:.2f} s)\n")
    print(prog.cost_summary())

    kernel = next((k for k in prog.kernels if k.kind == "row"), prog.kernels[0])
    print(f"\nthe CUDA of {kernel.name} ({kernel.kind}), first 30 lines:\n")
    print("\n".join(kernel.source.splitlines()[:30]))
    print("    ...\n")

    rng = np.random.default_rng(0)
    worst = 0.0
    for batch, length in ((1, 1), (2, 7), (2, 64)):
        x = rng.standard_normal((batch, length, 128)).astype(np.float32)
        start = time.perf_counter()
        got = prog.run({"x": x, **weights}, backend=backend)
        elapsed = time.perf_counter() - start
        error = float(np.abs(got - numpy_block(x, weights)).max())
        worst = max(worst, error)
        print(
            f"B={batch} T={length:<3d} on {backend}: max |error| vs NumPy float64 = {error:.1e}  "
            f"({elapsed * 1e3:.0f} ms)"
        )
    verdict = "PASS" if worst < TOLERANCE else "FAIL"
    print(f"\n{verdict}: every output within {TOLERANCE} of the reference")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
