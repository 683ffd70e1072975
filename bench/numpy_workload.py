"""A fixed NumPy workload that compile times are divided by, so that runs on a shared machine compare.

The development machine's 2 cores are shared, and a compile's seconds swing with the other users'
load. The same fixed work in NumPy, timed in a fresh process beside each compile, swings with it, so
the compile benches report their seconds over this workload's as well as the seconds themselves.
The workload mixes many small array calls (interpreter-bound, as the compiler is) with a few larger
ones, on one BLAS thread.

    python bench/numpy_workload.py       # prints the workload's seconds in a fresh process
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def workload() -> None:
    """The fixed work: a chain of small matrix products and elementwise steps, then a few sorts."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((48, 48))
    for _ in range(900):
        a = np.tanh(a @ a.T / 48.0) + 0.01 * a
        a -= a.mean(axis=0, keepdims=True)
    big = rng.standard_normal(400_000)
    for _ in range(3):
        np.sort(big)
        big = np.exp(-big * big) + big


def time_once() -> float:
    """The workload's seconds in this process (NumPy's import not counted)."""
    import numpy  # noqa: F401

    started = time.perf_counter()
    workload()
    return time.perf_counter() - started


def in_fresh_process() -> float:
    """The workload's seconds in a fresh Python process on one BLAS thread."""
    env = dict(os.environ, **ONE_THREAD)
    out = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return float(out.split()[0])


if __name__ == "__main__":
    print(time_once())
