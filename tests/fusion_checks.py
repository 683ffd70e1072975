"""Feeds and an emulator check shared by the fusion-rule tests and the search-target tests: each
compiled program runs at RUN_BINDINGS and is compared with the float64 reference."""
from __future__ import annotations

import numpy as np

import refcomp as rc
from refcomp import golden
from refcomp.fuzz.check import own_dims
from refcomp.ops.graph import toposort
from refcomp.symbolic.dims import evaluate_dim

RUN_BINDINGS = [{"B": 3, "T": 5}, {"B": 1, "T": 2}]


def random_feeds(outputs, binding, seed, scales=None):
    feeds = {}
    rng = np.random.default_rng(seed)
    nodes = toposort([t.node for t in outputs.values()])
    rows = {n.srcs[1].node.id: evaluate_dim(n.srcs[0].shape[0], binding)
            for n in nodes if n.op.name == "Gather"}
    for node in nodes:
        if node.op.name == "Input":
            shape = tuple(evaluate_dim(d, binding) for d in node.attrs["shape"])
            scale = (scales or {}).get(node.attrs["name"], 2.0)
            if node.dtype == "int32":  # a Gather's ids: rows of its table
                feeds[node.attrs["name"]] = rng.integers(0, rows[node.id], shape).astype(np.int32)
            else:
                feeds[node.attrs["name"]] = rng.uniform(-scale, scale, shape).astype(np.float32)
    return feeds


def check_on_emulator(prog, outputs, bindings=RUN_BINDINGS, scales=None):
    for k, binding in enumerate(bindings):
        feeds = random_feeds(outputs, binding, k, scales)
        binding = own_dims(list(outputs.values()), binding)
        got = prog.run(feeds, backend="emulator", dims=binding)
        want = rc.evaluate(outputs, feeds, dims=binding, precision="float64")
        for key in outputs:
            np.testing.assert_allclose(
                got[key], want[key], err_msg=f"{key} at {binding}", **golden.FLOAT32_TOLERANCE
            )
