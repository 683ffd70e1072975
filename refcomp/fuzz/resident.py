"""Fuzzed programs run with their inputs held on the backend (exec.resident), as a serving engine
holds its weights and KV pool: the same outputs must come back, a Scatter's write into a held table
left there (OnDevice) and read back."""
from __future__ import annotations

import numpy as np

from ..exec.resident import OnDevice, Resident
from ..ops.graph import input_nodes, toposort
from ..ops.primitives import INDEXED


def holdable(outputs, feeds) -> dict:
    """The feeds a Resident can hold for these outputs: float arrays of their input's own dtype, no
    ids computed from them (the runner checks ids on the host, so it refuses to hold those)."""
    nodes = toposort([t.node for t in outputs.values()])
    dtypes = {n.attrs["name"]: n.dtype for n in input_nodes(nodes)}
    id_sources = {n.attrs["name"] for node in nodes if node.op.kind in INDEXED
                  for n in input_nodes(toposort([node.srcs[1].node]))}
    return {name: a for name, a in feeds.items()
            if name not in id_sources and np.asarray(a).dtype.name == dtypes.get(name) != "bfloat16"}


def run_resident(program, outputs, feeds, backend: str, binding: dict) -> tuple[dict, int]:
    """(the outputs by name, downloaded, how many of them the run left in a held buffer)."""
    held = holdable(outputs, feeds)
    resident = Resident(held, backend)
    got = program.run({k: v for k, v in feeds.items() if k not in held}, backend=backend, dims=binding,
                      resident=resident)
    left = sum(isinstance(v, OnDevice) for v in got.values())
    return {k: v.numpy() if isinstance(v, OnDevice) else v for k, v in got.items()}, left
