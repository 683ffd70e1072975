"""The cost model: a roofline per kernel on a device profile.

A kernel's predicted time is its launch overhead plus the larger of (bytes moved / bandwidth) and
(flops / peak rate), both scaled by how much of the device its threads can occupy. Bytes count each
buffer the kernel reads once and its output once: a cache-friendly model that makes fusion (fewer
intermediate buffers) and tiling (operands read once) pay off, and charges a plain matmul for the
huge product it materialises. Symbolic dims are evaluated at a binding: the user's `dims_hint`, and
DEFAULT_DIM for any symbol it leaves out.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional

from ..codegen.legality import AccessModelError, Kernel, buffer_bytes
from ..ops.dtypes import DTYPES
from ..ops.primitives import LEAF, Node
from ..ops.graph import symbols_of
from ..symbolic.dims import evaluate_dim, evaluate_size

DEFAULT_DIM = 64  # the value of a symbolic dim the user gave no hint for


@dataclass(frozen=True)
class DeviceProfile:
    """Sources of each figure: docs/cost_model.md."""

    name: str = "H200"
    bandwidth: float = 4.3e12  # bytes/s from HBM, measured device-to-device copy (4.8e12 peak)
    flops: float = 60e12  # fp32 FLOP/s
    launch_s: float = 3e-6  # per kernel launch
    resident_threads: int = 132 * 2048  # SMs x threads per SM: below this the device is not full
    l2_bandwidth: float = 10e12  # bytes/s of sectors served by L2 (an estimate: NVIDIA publishes none)
    l2_bytes: int = 50 * 2 ** 20  # the GH100 L2 as configured on H100/H200 SXM


H200 = DeviceProfile()


@dataclass(frozen=True)
class KernelCost:
    name: str
    kind: str
    bytes: int  # from DRAM (HBM)
    flops: int
    threads: int
    time_s: float
    l2_bytes: int = 0  # 32 x the sectors its warps request (0: priced from the graph, not from its accesses)


def binding_for(nodes: Iterable[Node], dims_hint: Mapping[str, int] | None, edges=()) -> dict[str, int]:
    """The binding the model prices at: the hint, DEFAULT_DIM for every other dim of the nodes and of
    `edges` (the outputs, whose views may mention a dim no node has: x.expand("B", 4))."""
    hint = dict(dims_hint or {})
    return {
        s.name: int(hint.get(s.name, DEFAULT_DIM))
        for s in sorted(symbols_of(list(nodes), edges), key=lambda s: s.name)
    }


def elements(shape, bindings: Mapping[str, int]) -> int:
    return evaluate_size(shape, bindings)


def roofline(name: str, kind: str, nbytes: int, flops: int, threads: int, profile: DeviceProfile,
             l2_bytes: int = 0) -> KernelCost:
    """Launch plus the largest of DRAM, L2 and compute time, scaled by occupancy. The graph-level
    estimate: `l2_bytes` is what the kernel's iteration points read, as if every access coalesced."""
    occupancy = min(1.0, max(threads, 1) / profile.resident_threads)
    busy = max(nbytes / profile.bandwidth, l2_bytes / profile.l2_bandwidth, flops / profile.flops)
    return KernelCost(name, kind, int(nbytes), int(flops), int(threads), profile.launch_s + busy / occupancy)


def dram_bytes(moved: Mapping[str, float], footprints: Mapping[str, float], profile: DeviceProfile) -> float:
    """What reaches DRAM of the sectors a kernel requests (`moved`: bytes per buffer; `footprints`: each
    buffer's size). Each buffer's bytes come from DRAM once, and a re-read hits while the bytes the
    kernel touches between two reads of one line fit in L2. Spread evenly over the launch, a buffer
    of F bytes read R bytes' worth among T requested in all is read again after T F / R bytes, which
    touch at most the kernel's whole footprint: past the L2's size S its re-reads miss in proportion
    1 - S / distance. So a small table every warp consults (a block table, a matmul's few rows of A)
    stays in L2 while a large operand streams past it."""
    requested, footprint = sum(moved.values()), sum(footprints.values())
    dram = 0.0
    for buffer, touched in moved.items():
        size = footprints.get(buffer, touched)
        if touched <= size:
            dram += touched
            continue
        distance = min(footprint, requested * size / touched)
        missed = 0.0 if distance <= profile.l2_bytes else 1 - profile.l2_bytes / distance
        dram += size + (touched - size) * missed
    return dram


def access_cost(coarse: KernelCost, moved: Mapping[str, float], footprints: Mapping[str, float],
                profile: DeviceProfile) -> KernelCost:
    """A kernel priced from its memory accesses (codegen.access): the larger of DRAM time, L2 time
    and compute time, scaled by occupancy, plus the launch; flops and threads from the graph."""
    l2_bytes = sum(moved.values())
    dram = dram_bytes(moved, footprints, profile)
    occupancy = min(1.0, max(coarse.threads, 1) / profile.resident_threads)
    busy = max(dram / profile.bandwidth, l2_bytes / profile.l2_bandwidth, coarse.flops / profile.flops)
    return KernelCost(coarse.name, coarse.kind, int(dram), coarse.flops, coarse.threads,
                      profile.launch_s + busy / occupancy, int(l2_bytes))


SAMPLE = 256  # warp requests evaluated per access when a kernel is priced (counts are scaled up)


def kernel_cost(kernel: Kernel, coarse: KernelCost, bindings: Mapping[str, int], profile: DeviceProfile,
                sample: Optional[int] = SAMPLE) -> KernelCost:
    """A built kernel priced from its own index expressions (`coarse`, the graph-level estimate, gives
    the flops and threads; a kernel without an access plan, loaded from a file, keeps it)."""
    if kernel.plan is None:
        return coarse
    try:
        moved = buffer_bytes(kernel, bindings, sample)
    except AccessModelError:  # an index the model cannot evaluate: the graph's estimate stands
        return coarse
    footprints = {f"in{k}": stored_bytes(n, bindings) for k, n in enumerate(kernel.reads)}
    footprints.update({f"out{k}": stored_bytes(n, bindings) for k, n in enumerate(kernel.written)})
    footprints.update(scratch_bytes(kernel.launch, bindings))
    return access_cost(held_rows(kernel, coarse, bindings), moved, footprints, profile)


def held_rows(kernel: Kernel, coarse: KernelCost, bindings: Mapping[str, int]) -> KernelCost:
    """The graph's flops with the values a matmul's threads compute once for their row (codegen.staged)
    counted once a thread, not once per element of A and block column (search.tile_flops)."""
    held, launch = kernel.plan.held_values, kernel.launch
    if not held:
        return coarse
    n, batch = (evaluate_dim(d, bindings) for d in launch.extra)
    m, k, t = evaluate_dim(launch.work, bindings), evaluate_dim(kernel.plan.extent, bindings), launch.block
    columns = -(-n // t)
    per_element = held * batch * m * k * columns
    per_thread = held * t * t * launch.slices * columns * -(-m // t) * batch * launch.splits
    return replace(coarse, flops=max(coarse.flops - per_element + per_thread, 0))


def scratch_bytes(launch, bindings: Mapping[str, int]) -> dict[str, int]:
    """The float scratch of a launch (a split K's partials ws0, carried row statistics' ws2) by size:
    stored by one block and loaded by another, like any buffer each comes from DRAM once."""
    partials, stats = launch.scratch(bindings)[0], launch.row_scratch(bindings)[0]
    return {name: 4 * size for name, size in (("ws0", partials), ("ws2", stats)) if size}


def minimum_bytes(
    output_nodes: Iterable[Node], all_nodes: Iterable[Node], bindings: Mapping[str, int]
) -> int:
    """Every input (weights included) read once and every output written once."""
    inputs = {n.attrs["name"]: n for n in all_nodes if n.op.name == "Input"}
    outputs = {n.id: n for n in output_nodes}
    return sum(stored_bytes(n, bindings) for n in list(inputs.values()) + list(outputs.values()))


def stored_bytes(node: Node, bindings: Mapping[str, int]) -> int:
    """The bytes of a node's buffer at this binding."""
    return DTYPES[node.dtype].itemsize * elements(node.shape, bindings)


def is_compute(node: Node) -> bool:
    return node.op.kind != LEAF
