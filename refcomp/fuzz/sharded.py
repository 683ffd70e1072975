"""Random shardings: fuzzed graphs compiled for a device mesh (rc.spmd) with every input split at
random, run on the simulated mesh, and compared with the single-device reference.

The binding gives every symbol a multiple of each mesh axis, so random shardings of symbolic dims
divide; int dims are split only where they divide. The graphs' own propagation paths (views, reduces
over split dims, partial sums, gathers) are what is exercised, and half the outputs are laid out at
random with rc.shard, so that values move between layouts (all-to-alls, reduce-scatters in the graph).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import RefcompError
from .check import compare, own_dims, storage_of
from .graph import SYMBOLS
from .generator import generate


@dataclass
class ShardedResult:
    compared: int = 0
    mismatches: list = field(default_factory=list)
    collectives: Counter = field(default_factory=Counter)
    sharded_inputs: int = 0


def random_spec(rng, shape, binding, mesh) -> tuple:
    """Each dim split over a mesh axis it divides (at `binding`), each axis at most once, at random."""
    spec, free = [], [a for a, n in mesh.axes if n > 1]
    for d in shape:
        size = d if isinstance(d, int) else binding.get(str(d), 0)  # an int, or a symbol's name
        fits = [a for a in free if size and size % mesh.sizes[a] == 0]
        if fits and rng.random() < 0.5:
            axis = fits[int(rng.integers(len(fits)))]
            free.remove(axis)
            spec.append(axis)
        else:
            spec.append(None)
    return tuple(spec)


def check_sharded(count: int, seed: int, mesh, backend: str = "numpy") -> ShardedResult:
    """`count` fuzzed graphs on `mesh` with random input shardings; mismatches name the graph's code."""
    import refcomp as rc
    result = ShardedResult()
    rng = np.random.default_rng([seed, 1_000_003])
    step = int(np.lcm.reduce([n for _, n in mesh.axes]))
    for index in range(count):
        g = generate(seed, index)
        outputs = g.build("")
        binding = own_dims(outputs.values(), {s: step * int(rng.integers(1, 3)) for s in SYMBOLS})
        feeds = g.feeds("", binding, 0)
        try:
            want64 = rc.evaluate(outputs, feeds, dims=binding, precision="float64")
            want32 = rc.evaluate(outputs, feeds, dims=binding, precision="float32")
        except RefcompError:
            continue
        specs = {spec.name: random_spec(rng, tuple(spec.shape), binding, mesh) for spec in g.inputs}
        result.sharded_inputs += sum(any(a is not None for a in s) for s in specs.values())
        laid = {}  # half the outputs laid out at random (rc.shard): the moves between layouts are exercised
        for key, tensor in outputs.items():
            if tensor.shape and rng.random() < 0.5:
                laid[key] = random_spec(rng, tuple(tensor.shape), binding, mesh)
                outputs[key] = rc.shard(tensor, laid[key])
        try:
            prog = rc.spmd.compile(outputs, mesh, shardings=specs, search=False)
            got = prog.run(feeds, backend=backend, dims=binding)
        except RefcompError as exc:
            result.mismatches.append(f"graph {seed}:{index} with {specs}, outputs laid out {laid}, raised "
                                     f"{type(exc).__name__}: {exc}\n{g.code()}")
            continue
        result.collectives.update(c.kind for c in prog.collectives)
        for key, tensor in outputs.items():
            result.compared += 1
            message = compare(got[key], want64[key], want32[key], storage_of(tensor))
            if message is not None:
                result.mismatches.append(f"graph {seed}:{index} output {key} with {specs}, outputs laid out {laid}: "
                                         f"{message}\n{g.code()}")
    return result
