"""The collectives: what devices exchange between the stages of a local program.

Each is defined once here: its meaning on the arrays of one group of devices (those that differ only
in the mesh axis it runs over), as NumPy, and its cost on a ring. The ring formulas are the textbook
ones (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms", 2009): with n devices and b bytes
per device, an all-reduce sends 2(n-1)/n * b bytes from each device, an all-gather (n-1) * b (b: its
shard), a reduce-scatter and an all-to-all (n-1)/n * b. Link: NVLink 4 on an H200 (HGX), 900 GB/s
per GPU both directions together, 450 GB/s each way (NVIDIA's H200 datasheet).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

LINK_BYTES_PER_S = 450e9  # NVLink 4, one direction, per GPU
LATENCY_S = 8e-6  # a collective's launch and synchronisation, about NCCL's small-message time within a node


def _sum(arrays):
    total = arrays[0].copy()
    with np.errstate(all="ignore"):  # inf - inf is NaN here as on a device
        for a in arrays[1:]:  # in device order: every device gets bit-identical sums
            total = total + a
    return total


def _max(arrays):
    return np.maximum.reduce(arrays) if len(arrays) > 1 else arrays[0].copy()


def _scatter(full, dim, n):
    return [np.ascontiguousarray(part) for part in np.split(full, n, axis=dim)]


@dataclass(frozen=True)
class Collective:
    name: str
    numpy: Callable  # (arrays of one group, dim, dim2) -> each device's result, in group order
    sent: Callable[
        [float, int], float
    ]  # (bytes of one device's input, group size) -> bytes each device sends
    doc: str


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in [
        Collective(
            "AllReduceSum",
            lambda xs, dim, dim2: [_sum(xs)] * len(xs),
            lambda b, n: 2 * (n - 1) / n * b,
            "every device gets the sum of the group's arrays "
            "(partial sums of a contraction over a sharded axis)",
        ),
        Collective(
            "AllReduceMax",
            lambda xs, dim, dim2: [_max(xs)] * len(xs),
            lambda b, n: 2 * (n - 1) / n * b,
            "every device gets the elementwise maximum (a max over a sharded axis)",
        ),
        Collective(
            "AllGather",
            lambda xs, dim, dim2: [np.concatenate(xs, axis=dim)] * len(xs),
            lambda b, n: (n - 1) * b,
            "every device gets the shards concatenated along `dim`: the whole tensor",
        ),
        Collective(
            "ReduceScatter",
            lambda xs, dim, dim2: _scatter(_sum(xs), dim, len(xs)),
            lambda b, n: (n - 1) / n * b,
            "the sum, split along `dim`: device i keeps part i",
        ),
        Collective(
            "AllToAll",
            lambda xs, dim, dim2: [
                np.concatenate([_scatter(x, dim, len(xs))[i] for x in xs], axis=dim2) for i in range(len(xs))
            ],
            lambda b, n: (n - 1) / n * b,
            "each device splits its array along `dim` and sends part i to device i, "
            "which concatenates along `dim2`",
        ),
    ]
}


@dataclass(frozen=True)
class CollectiveCost:
    """One collective of a program, as `SpmdProgram.collectives` lists it."""

    kind: str
    axis: str  # the mesh axis it runs over
    tensor: str  # what it exchanges (the node it completes)
    bytes_per_device: int  # each device's input
    time_s: float  # the ring model's time

    def __str__(self) -> str:
        return (
            f"{self.kind:13s} over {self.axis:4s} {self.tensor:28s} "
            f"{self.bytes_per_device:>12,} B per device {self.time_s * 1e6:8.2f} us"
        )


def collective_time(kind: str, nbytes: float, group: int) -> float:
    """The ring model: bytes each device sends over one NVLink direction, plus a fixed latency."""
    if group <= 1:
        return 0.0
    return LATENCY_S + COLLECTIVES[kind].sent(nbytes, group) / LINK_BYTES_PER_S
