"""Differential fuzzing: random primitive graphs, compiled with and without the search, run on the
host emulator and compared with the NumPy reference.

Each random graph is a short Python program over `rc` (kept as text, so a failure prints a
reproducer that runs as is). It starts from random inputs (1-4 axes, sizes 1-7, some symbolic:
"B" and "T"; now and then one long axis of a few hundred) and applies a random chain of
elementwise primitives and high-level ops, broadcasts, view ops (permute, reshape, slices with
steps, pad, flip, expand, windows), reductions on random axes, matmul-shaped patterns,
softmax / layer-norm rows, convolution and pooling, embedding lookups and concatenation, and calls
written the PyTorch way (split / chunk pieces, clamp, rc.tril, max(dim).values and .indices, var with a
positional dim: `torch_steps.py`).

Values stay in safe domains by construction: the generator tracks an interval for every tensor,
applies log2 / sqrt / recip only to values >= 0.5 (or builds one, e.g. x*x + 1), exp2 only to
bounded values, rescales by powers of two (exact) when magnitudes grow, and applies the
discontinuous ops (comparisons, where, fmod, %, argmax) only to values that are exact in float32
(inputs and their views, maxima, ...), so the float32 program and the float64 reference take the
same branch.

Many independent graphs go into ONE program (a dict of outputs): g++ dominates the cost, so a
program of 30 graphs costs little more than one. Every program is compiled twice (search on and
off) and run at two bindings of the symbolic dims; each output is compared with
`rc.evaluate(..., precision="float64")` at golden.FLOAT32_TOLERANCE, widened only by what the
computation itself makes unavoidable: 4x the float32 reference's own error at that element (an
ill-conditioned element, e.g. a layer norm of a nearly constant row, is as far off in the NumPy
float32 reference). NaN never passes, and the generator keeps every reference finite (a reference
that is not finite where no input holds planted specials is a mismatch: an overflow inside it). A program
whose compile or run exceeds `--timeout` is reported too (its slow graphs are then found alone).

Usage (the documented long run: about 5 minutes per 1,000 graphs on 2 idle cores, so 50 minutes
for 10,000; programs run in `--jobs` child processes):

    python -m refcomp.fuzz --count 10000 --seed 0

prints progress and a summary, and exits non-zero on any mismatch or error after printing a
reproducer: the seed and graph index, the bindings, the graph's code (and, shrunk, the smallest
failing prefix of it) and the difference. `--replay SEED:INDEX` (with the run's --per-program)
rebuilds one graph, prints its code and checks it alone. Bugs already reported whose triggers the
generator steers around are listed in KNOWN_BUGS (`--known-bugs` generates them again).
"""
from .graph import (
    EDGE_BINDING,
    FuzzGraph,
    InputSpec,
    KNOWN_BUGS,
    LIMIT,
    LONG,
    MAX_BINDING,
    MAX_ELEMENTS,
    SYMBOLS,
)
from .generator import Generator, Var, generate
from .check import (
    BatchResult,
    Mismatch,
    bindings_for,
    check_batch,
    check_graph,
    compare,
    own_dims,
    shrink,
    tolerance,
)
from .cli import main, run, run_programs

__all__ = [
    'BatchResult',
    'EDGE_BINDING',
    'FuzzGraph',
    'Generator',
    'InputSpec',
    'KNOWN_BUGS',
    'LIMIT',
    'LONG',
    'MAX_BINDING',
    'MAX_ELEMENTS',
    'Mismatch',
    'SYMBOLS',
    'Var',
    'bindings_for',
    'check_batch',
    'check_graph',
    'compare',
    'generate',
    'main',
    'own_dims',
    'run',
    'run_programs',
    'shrink',
    'tolerance',
]
