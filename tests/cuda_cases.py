"""Shared helpers for tests that compile golden cases and run them on a backend."""
from __future__ import annotations

import functools

import refcomp as rc
from refcomp import golden

CASES = golden.load_cases()
CASE_IDS = [c.name for c in CASES]


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
        problems += [f"binding {i}: {p}" for p in golden.compare(got, golden.expected(case, i), golden.case_tolerance(case))]
    return problems


# A hand-written tiled matmul (shared-memory tiles padded to TILE + 1, two barriers per tile): the
# executor tests run it, and the profiler tests count its requests and bank conflicts.
MATMUL = r"""
#define TILE 16
extern "C" __global__ void k_mm(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                                long long M, long long N, long long K) {
    __shared__ float As[TILE][TILE + 1];
    __shared__ float Bs[TILE][TILE + 1];
    long long row = blockIdx.y * (long long)TILE + threadIdx.y;
    long long col = blockIdx.x * (long long)TILE + threadIdx.x;
    float acc = 0.0f;
    for (long long t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? a[row * K + t + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < K) ? b[(t + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) c[row * N + col] = acc;
}
"""
