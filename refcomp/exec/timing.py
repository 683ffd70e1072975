"""GPU timing of a compiled program's kernels, for measured mode (refcomp.measure) and the benchmarks.

Only the kernels are timed, not the uploads and downloads of `Program.run`:

* inputs are uploaded and intermediates allocated once (`Program.prepare`, the runner's own buffer
  setup: the same binding checks and memory plan), then each timed round launches every kernel of
  `Program.launches` in order on the default stream;
* every round starts from a cold L2 (a buffer twice the L2's size is overwritten between
  rounds), because the cost model counts bytes from memory, not from cache;
* the rounds are queued behind a short "spin" kernel that keeps the GPU busy while Python
  enqueues them, so the events measure back-to-back kernels rather than Python's launch rate.
  If the spin ended before the host was done enqueuing, it is retried with a longer spin, and a
  timing that still drained is flagged `host_bound`.

Everything here needs PyCUDA and a CUDA device; without them every entry point raises
RefcompError naming what is missing.
"""
from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from ..errors import RefcompError
from .backends import get_backend
from .emulator import check_launch_shape
from .pycuda_backend import DeviceBuffer, cuda_driver, pycuda_unavailable_reason

_MAX_SPIN_S = 2.0
_QUEUE_OPS = 512  # launches, event records and memsets queued at once (the driver's queue holds about 1024)


# --- availability --------------------------------------------------------------------------------
def gpu_unavailable_reason() -> Optional[str]:
    """None when PyCUDA can run kernels here, else what is missing and how to fix it."""
    return pycuda_unavailable_reason()


def require_gpu(what: str = "measured mode") -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise RefcompError(f"{what} times candidate programs on a GPU, and none is usable here: {reason}")


# --- timing --------------------------------------------------------------------------------------
@dataclass
class Timing:
    median_s: float  # median over the timed rounds of all the program's kernels, back to back
    rounds_s: list[float]
    kernels: list[tuple[str, float]]  # (kernel name, median seconds) in launch order, when timed per kernel
    host_bound: bool = (
        False  # the GPU may have waited for Python between launches: the time is an upper bound
    )
    flushed_l2: bool = True


_SPIN_SOURCE = r"""
__global__ void refcomp_spin(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""


@functools.lru_cache(maxsize=None)
def _spin_function():
    from pycuda.compiler import SourceModule
    fn = SourceModule(_SPIN_SOURCE).get_function("refcomp_spin")
    fn.prepare("Q")
    return fn


@functools.lru_cache(maxsize=None)
def _flush_buffer():
    """A device buffer twice the L2's size: overwriting it evicts whatever the L2 held."""
    drv = cuda_driver()
    try:
        l2 = int(drv.Context.get_device().get_attribute(drv.device_attribute.L2_CACHE_SIZE))
    except Exception:  # attribute missing in an old PyCUDA: assume a large L2
        l2 = 64 << 20
    nbytes = max(2 * l2, 8 << 20)
    return drv.mem_alloc(nbytes), nbytes // 4


def prepared_launches(program, feeds: Mapping[str, np.ndarray], dims: Optional[Mapping[str, int]]):
    """Program.run up to the launches (the same binding checks, buffers and launch list), with each
    launch prepared for PyCUDA's low-overhead call; returns (launches, allocations to free)."""
    from pycuda.compiler import SourceModule

    be = get_backend("pycuda")
    bindings, buffers = program.prepare(be, feeds, dims)
    owned: list[DeviceBuffer] = list({id(b): b for b in buffers.values()}.values())
    module = SourceModule(program.source, no_extern_c=True, arch=be.arch)
    launches = []
    for kernel, grid, block, kernel_args in program.launches(buffers, bindings):
        g, b = check_launch_shape(grid, block)
        params = kernel.signature.params
        fn = module.get_function(kernel.name)
        fn.prepare("".join("q" if p.ctype == "long long" else "P" for p in params))
        args = []
        for p, a in zip(params, kernel_args):
            if p.ctype == "long long":
                args.append(np.int64(a))
            elif isinstance(a, DeviceBuffer):
                args.append(int(a.allocation))
            else:
                raise RefcompError(
                    f"kernel {kernel.name}: {p.ident} ({p.ctype}) got {type(a).__name__}, not a device buffer"
                )
        launches.append((kernel.name, fn, g, b, tuple(args)))
    return launches, owned


def time_program(
    program,
    feeds: Mapping[str, np.ndarray],
    dims: Optional[Mapping[str, int]] = None,
    repeats: int = 20,
    warmup: int = 5,
    flush_l2: bool = True,
    per_kernel: bool = False,
) -> Timing:
    """Median time of one run of `program`'s kernels (CUDA events), inputs already on the device.

    With `per_kernel` an event is also recorded between kernels, giving each kernel's median (the
    extra events cost the total a little). Rounds are queued in batches small enough for the
    driver's launch queue, each batch behind its own spin kernel.
    """
    require_gpu("timing a program")
    drv = cuda_driver()
    launches, owned = prepared_launches(program, feeds, dims)
    try:
        if not launches:
            return Timing(0.0, [0.0] * repeats, [], False, flush_l2)
        flush, words = _flush_buffer() if flush_l2 else (None, 0)
        marks = len(launches) + 1 if per_kernel else 2

        def enqueue(events=None):
            if flush is not None:
                drv.memset_d32_async(int(flush), 0, words)
            if events:
                events[0].record()
            for j, (_, fn, g, b, args) in enumerate(launches):
                fn.prepared_call(g, b, *args)
                if events and per_kernel:
                    events[j + 1].record()
            if events and not per_kernel:
                events[1].record()

        def batch(n: int, spin_s: float):
            rounds = [[drv.Event() for _ in range(marks)] for _ in range(n)]
            _spin_function().prepared_call((1, 1, 1), (1, 1, 1), np.uint64(int(spin_s * 1e9)))
            spun = drv.Event()
            spun.record()
            for events in rounds:
                enqueue(events)
            drained = spun.query()  # the spin was over before the last round was queued: there may be gaps
            rounds[-1][-1].synchronize()
            return rounds, drained

        try:
            for _ in range(max(warmup, 1)):
                enqueue()
            drv.Context.synchronize()
            probe = [drv.Event() for _ in range(marks)]
            started = time.perf_counter()
            enqueue(probe)
            host_round = time.perf_counter() - started
            drv.Context.synchronize()

            per_batch = max(1, min(repeats, _QUEUE_OPS // (len(launches) + marks + 1)))
            spin_s = min(_MAX_SPIN_S, max(1e-3, 2.0 * host_round * per_batch))
            host_bound, done, all_rounds = False, 0, []
            while done < repeats:
                n = min(per_batch, repeats - done)
                rounds, drained = batch(n, spin_s)
                while drained and spin_s < _MAX_SPIN_S:
                    spin_s = min(_MAX_SPIN_S, spin_s * 4)
                    rounds, drained = batch(n, spin_s)
                host_bound |= drained
                all_rounds += rounds
                done += n
        except drv.Error as exc:
            raise RefcompError(f"running the program's kernels failed on the GPU: {exc}") from exc
        totals = [events[0].time_till(events[-1]) * 1e-3 for events in all_rounds]
        kernels = []
        if per_kernel:
            kernels = [
                (name, statistics.median(events[j].time_till(events[j + 1]) * 1e-3 for events in all_rounds))
                for j, (name, _, _, _, _) in enumerate(launches)
            ]
        return Timing(statistics.median(totals), totals, kernels, host_bound, flush_l2)
    finally:
        for buf in owned:
            try:
                buf.allocation.free()
            except Exception:  # already freed, or the context is gone
                pass
