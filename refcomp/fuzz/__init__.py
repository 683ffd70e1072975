"""Differential fuzzing: random graphs over `rc`, compiled with and without the search, run on the
host emulator and compared with the float64 NumPy reference; `python -m refcomp.fuzz` runs it.

What it generates, how it keeps values where float32 and float64 agree, how outputs are compared,
the command line and the long runs: docs/reliability.md, "The differential fuzzer".
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
