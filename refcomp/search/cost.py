"""The cost model: a roofline per kernel on a device profile.

A kernel's predicted time is its launch overhead plus the larger of (bytes moved / bandwidth) and
(flops / peak rate), both scaled by how much of the device its threads can occupy. Bytes count each
buffer the kernel reads once and its output once: a cache-friendly model that makes fusion (fewer
intermediate buffers) and tiling (operands read once) pay off, and charges a plain matmul for the
huge product it materialises. Symbolic dims are evaluated at a binding: the user's `dims_hint`, and
DEFAULT_DIM for any symbol it leaves out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from ..ops.primitives import LEAF, Node
from ..ops.graph import symbols_of
from ..symbolic.dims import evaluate_dim, prod

DEFAULT_DIM = 64  # the value of a symbolic dim the user gave no hint for


@dataclass(frozen=True)
class DeviceProfile:
    name: str = "H200"
    bandwidth: float = 4.3e12  # bytes/s, measured device-to-device copy
    flops: float = 60e12  # fp32 FLOP/s
    launch_s: float = 3e-6  # per kernel launch
    resident_threads: int = 132 * 2048  # SMs x threads per SM: below this the device is not full


H200 = DeviceProfile()


@dataclass(frozen=True)
class KernelCost:
    name: str
    kind: str
    bytes: int
    flops: int
    threads: int
    time_s: float


def binding_for(nodes: Iterable[Node], dims_hint: Mapping[str, int] | None, edges=()) -> dict[str, int]:
    """The binding the model prices at: the hint, DEFAULT_DIM for every other dim of the nodes and of
    `edges` (the outputs, whose views may mention a dim no node has: x.expand("B", 4))."""
    hint = dict(dims_hint or {})
    return {s.name: int(hint.get(s.name, DEFAULT_DIM)) for s in sorted(symbols_of(list(nodes), edges), key=lambda s: s.name)}


def elements(shape, bindings: Mapping[str, int]) -> int:
    return evaluate_dim(prod(shape), bindings)


def roofline(name: str, kind: str, nbytes: int, flops: int, threads: int, profile: DeviceProfile) -> KernelCost:
    occupancy = min(1.0, max(threads, 1) / profile.resident_threads)
    time = profile.launch_s + max(nbytes / (profile.bandwidth * occupancy), flops / (profile.flops * occupancy))
    return KernelCost(name, kind, int(nbytes), int(flops), int(threads), time)


def minimum_bytes(output_nodes: Iterable[Node], all_nodes: Iterable[Node], bindings: Mapping[str, int]) -> int:
    """Every input (weights included) read once and every output written once."""
    inputs = {n.attrs["name"]: n for n in all_nodes if n.op.name == "Input"}
    outputs = {n.id: n for n in output_nodes}
    return 4 * (sum(elements(n.shape, bindings) for n in inputs.values()) + sum(elements(n.shape, bindings) for n in outputs.values()))


def is_compute(node: Node) -> bool:
    return node.op.kind != LEAF
