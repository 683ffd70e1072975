"""What a kernel launch costs on a GPU: the cost model's launch_s (3 us) is an estimate until measured.

Empty kernels (132 blocks of 256 threads, an H200's SMs once over) launched back to back in one
stream, queued behind a spin kernel so that Python's launch rate does not show, and the same kernels
captured in one CUDA graph and launched with one call (as serving engines launch a decode step).
The device time per launch is what the model's launch stands for; the host's time per call says
whether Python could keep up. bench/gpu_bench.py runs both beside its workloads.

Runs only where PyCUDA and a CUDA device are usable; elsewhere it prints "skipped: <reason>" and
exits 0.

    python bench/launch_bench.py [--launches 2000] [--repeats 5]

Writes bench/results/launch.json.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from refcomp.search.cost import H200  # noqa: E402

RESULTS = ROOT / "bench" / "results"


# A kernel that does no work (n < 0 at every launch): its launches back to back show what a launch
# and the gap before the next one cost, the cost model's launch_s (an estimate until measured here).
_NOTHING_SOURCE = r"""
__global__ void refcomp_nothing(float* p, int n)
{
    if ((int)(blockIdx.x * blockDim.x + threadIdx.x) == n) p[0] = 1.0f;
}
"""


@functools.lru_cache(maxsize=None)
def _nothing_function():
    from pycuda.compiler import SourceModule

    nothing = SourceModule(_NOTHING_SOURCE).get_function("refcomp_nothing")
    nothing.prepare("Pi")
    return nothing


def launch_gap(launches: int = 2000, repeats: int = 5) -> dict:
    """Device time per launch of `launches` empty kernels back to back in one stream (132 blocks of
    256 threads, an H200's SMs once over), queued behind a spin kernel so that Python's launch rate
    does not show (a round whose spin ended before its last launch was queued is run again with a
    longer spin), and the host's time per launch call. The median of `repeats` rounds each."""
    from refcomp.exec.pycuda_backend import cuda_driver
    from refcomp.exec.timing import _spin_function

    drv = cuda_driver()
    nothing = _nothing_function()
    target = drv.mem_alloc(4)

    def round_(spin_s: float) -> tuple[float, float, bool]:
        _spin_function().prepared_call((1, 1, 1), (1, 1, 1), np.uint64(int(spin_s * 1e9)))
        spun, start, end = drv.Event(), drv.Event(), drv.Event()
        spun.record()
        start.record()
        began = time.perf_counter()
        for _ in range(launches):
            nothing.prepared_call((132, 1, 1), (256, 1, 1), int(target), -1)
        host = (time.perf_counter() - began) / launches
        end.record()
        drained = spun.query()  # the spin was over before the last launch was queued: gaps may show
        end.synchronize()
        return start.time_till(end) * 1e-3 / launches, host, drained

    try:
        round_(0.01)  # warm: the module loaded, the driver's queue primed
        device, host, spin_s, host_bound = [], [], 0.05, 0
        for _ in range(repeats):
            per_launch, per_call, drained = round_(spin_s)
            while drained and spin_s < 2.0:
                spin_s = min(2.0, spin_s * 4)
                per_launch, per_call, drained = round_(spin_s)
            host_bound += drained
            device.append(per_launch)
            host.append(per_call)
        return {"launches": launches, "device_s_per_launch": statistics.median(device),
                "host_s_per_launch": statistics.median(host), "host_bound_rounds": host_bound,
                "profile_launch_s": H200.launch_s, "device_s": device, "host_s": host}
    finally:
        target.free()


def driver_call():
    """A caller of libcuda's functions by name through ctypes (PyCUDA binds no stream capture or
    graph launch), raising on any CUresult but CUDA_SUCCESS."""
    lib = ctypes.CDLL("libcuda.so.1")

    def call(name: str, *args) -> None:
        result = getattr(lib, name)(*args)
        if result != 0:
            raise RuntimeError(f"{name} returned CUresult {result}")
    return call


def time_as_graph(enqueue, repeats: int) -> tuple[list, list]:
    """`enqueue(stream)`'s launches captured in one CUDA graph (libcuda's stream capture through ctypes:
    PyCUDA binds none) and the graph launched `repeats` times after one launch that uploads it: the
    device seconds of each launch of the whole graph (CUDA events), and the host's seconds per call."""
    from refcomp.exec.pycuda_backend import cuda_driver

    drv, call = cuda_driver(), driver_call()
    stream = drv.Stream()
    handle, graph, runnable = ctypes.c_void_p(stream.handle), ctypes.c_void_p(), ctypes.c_void_p()
    try:
        call("cuStreamBeginCapture_v2", handle, ctypes.c_int(2))  # CU_STREAM_CAPTURE_MODE_RELAXED
        enqueue(stream)
        call("cuStreamEndCapture", handle, ctypes.byref(graph))
        call("cuGraphInstantiateWithFlags", ctypes.byref(runnable), graph, ctypes.c_ulonglong(0))
        device, host = [], []
        for r in range(repeats + 1):  # the first launch uploads the graph
            start, end = drv.Event(), drv.Event()
            start.record(stream)
            began = time.perf_counter()
            call("cuGraphLaunch", runnable, handle)
            host_s = time.perf_counter() - began
            end.record(stream)
            end.synchronize()
            if r:
                device.append(start.time_till(end) * 1e-3)
                host.append(host_s)
        return device, host
    finally:
        if runnable.value:
            call("cuGraphExecDestroy", runnable)
        if graph.value:
            call("cuGraphDestroy", graph)


def graph_launch_gap(launches: int = 2000, repeats: int = 5) -> dict:
    """Device time per launch of the same empty kernels captured in one CUDA graph and launched with
    one call (as serving engines launch a decode step), and the host's time per graph launch. The
    median of `repeats` rounds."""
    from refcomp.exec.pycuda_backend import cuda_driver

    nothing, target = _nothing_function(), cuda_driver().mem_alloc(4)

    def enqueue(stream):
        for _ in range(launches):
            nothing.prepared_async_call((132, 1, 1), (256, 1, 1), stream, int(target), -1)

    try:
        device, host = time_as_graph(enqueue, repeats)
        device = [d / launches for d in device]
        return {"launches": launches, "device_s_per_launch": statistics.median(device),
                "host_s_per_graph_launch": statistics.median(host), "profile_launch_s": H200.launch_s,
                "device_s": device, "host_s": host}
    finally:
        target.free()


def no_gpu() -> bool:
    """Whether PyCUDA or a device is missing, printed as "skipped: <reason>" (the bench exits 0)."""
    from refcomp.exec.pycuda_backend import pycuda_unavailable_reason
    reason = pycuda_unavailable_reason()
    if reason is not None:
        print(f"skipped: {reason}")
    return reason is not None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=2000, help="empty kernels a round")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (the median is reported)")
    parser.add_argument("--out", default=str(RESULTS / "launch.json"), help="JSON output path ('' for none)")
    args = parser.parse_args(argv)
    if no_gpu():
        return 0
    out = {"stream": launch_gap(args.launches, args.repeats),
           "graph": graph_launch_gap(args.launches, args.repeats)}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'launched':>10}  {'device us / launch':>18}  {'host us / call':>14}  model us")
    stream, graph = out["stream"], out["graph"]
    print(f"{'one by one':>10}  {stream['device_s_per_launch'] * 1e6:>18.2f}  "
          f"{stream['host_s_per_launch'] * 1e6:>14.2f}  {H200.launch_s * 1e6:.1f}")
    print(f"{'CUDA graph':>10}  {graph['device_s_per_launch'] * 1e6:>18.2f}  "
          f"{graph['host_s_per_graph_launch'] * 1e6:>14.1f}  (one call for {args.launches})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
