"""Shared helpers for tests that compile golden cases and run them on a backend."""
from __future__ import annotations

import functools

import pytest
import sympy

import refcomp as rc
from refcomp import golden

CASES = golden.load_cases()
CASE_IDS = [c.name for c in CASES]

# The checks that cost a build of their own per golden case (nvcc, AddressSanitizer, the profiler,
# the plain lowering on the emulator) run on SLICE by default and on every case under `pytest -m
# slow`; every case's searched program runs on the emulator by default. SLICE holds cases that
# together reach every feature (`features`) of every golden program, plain and searched: each kind
# of kernel, launch mode and parameter type, each primitive op at each dtype, each kind of view read.
# A slow test (test_golden_slice.py) keeps it so.
SLICE = ("mixed_storage", "model_tiny_decoder", "sym_slicing", "half_mlp", "nn_conv2d_basic", "prim_gather",
         "hl_where_select", "prim_sin", "prim_sum_reduce", "prim_iota", "sym_reductions", "sym_arange",
         "sym_conv_pool", "bf16_attention", "half_layer_norm", "nn_embedding", "sym_embedding", "sym_matmul")


def sliced(cases=CASES) -> list:
    """The cases as parameters, those outside SLICE marked slow."""
    return [pytest.param(c, id=c.name, marks=() if c.name in SLICE else pytest.mark.slow) for c in cases]


def _view_features(stack) -> set:
    found = {("views", min(len(stack.views), 3))}
    for v in stack.views:
        found |= {"masked"} if v.mask is not None else set()
        for stride in map(sympy.sympify, v.strides):
            found.add("symbolic stride" if not stride.is_number else "flipped" if stride < 0
                      else "broadcast" if stride == 0 else "stride")
        offset = sympy.sympify(v.offset)
        found |= {"offset" if offset.is_number else "symbolic offset"} if offset != 0 else set()
    return found


def features(name: str) -> set:
    """What a golden case's programs (plain and searched) are made of, for SLICE's coverage."""
    found = set()
    for search in (False, True):
        for k in compiled(name, search).kernels:
            found.add((search, k.kind, k.launch.mode, tuple(sorted({p.ctype for p in k.signature.params}))))
            for node in k.nodes:
                found.add((node.op.name, node.dtype))
                found |= {(search, f) for edge in node.srcs for f in _view_features(edge.views)}
    return found


@functools.lru_cache(maxsize=None)
def compiled(name: str, search: bool, cache: bool = True) -> rc.Program:
    """With cache=False the program is compiled here, not loaded from the program cache (a loaded
    program has no access plans for the cost model)."""
    case = next(c for c in CASES if c.name == name)
    return rc.compile(case.build(), search=search, cache=cache)




def check_case(case, backend: str, search: bool) -> list[str]:
    """Run every binding of a golden case; return mismatches (empty when all outputs match)."""
    prog = compiled(case.name, search)
    problems = []
    for i in range(len(case.bindings)):
        feeds, dims = golden.case_feeds(case, i)
        got = prog.run(feeds, backend=backend, dims=dims)
        problems += [
            f"binding {i}: {p}"
            for p in golden.compare(got, golden.expected(case, i), golden.case_tolerance(case))
        ]
    return problems


# A hand-written tiled matmul (shared-memory tiles padded to TILE + 1, two barriers per tile): the
# executor tests run it, and the profiler tests count its requests and bank conflicts.
MATMUL = r"""
#define TILE 16
extern "C" __global__ void k_mm(const float* __restrict__ a, const float* __restrict__ b,
                                float* __restrict__ c, long long M, long long N, long long K) {
    __shared__ float As[TILE][TILE + 1];
    __shared__ float Bs[TILE][TILE + 1];
    long long row = blockIdx.y * (long long)TILE + threadIdx.y;
    long long col = blockIdx.x * (long long)TILE + threadIdx.x;
    float acc = 0.0f;
    for (long long t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? a[row * K + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] =
            (col < N && t + threadIdx.y < K) ? b[(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) c[row * N + col] = acc;
}
"""
