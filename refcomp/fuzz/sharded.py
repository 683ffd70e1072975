"""Random shardings: fuzzed graphs compiled for a device mesh (rc.spmd) with every input split at
random, run on the simulated mesh, and compared with the single-device reference.

The binding gives every symbol a multiple of each mesh axis, so random shardings of symbolic dims
divide; int dims are split only where they divide. The graphs' own propagation paths (views, reduces
over split dims, partial sums, gathers) are what is exercised, and half the outputs are laid out at
random with rc.shard, so that values move between layouts (all-to-alls, reduce-scatters in the graph).
A quarter of the graphs with a symbolic dim also have a dim named as its local symbol once was (`B_dp`
beside B, see clashing_names), a name the local symbol must then not take.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import RefcompError
from .check import compare, own_dims, storage_of
from .graph import SYMBOLS, FuzzGraph, InputSpec
from .generator import generate


@dataclass
class ShardedResult:
    compared: int = 0
    mismatches: list = field(default_factory=list)
    collectives: Counter = field(default_factory=Counter)
    sharded_inputs: int = 0
    clashes: int = 0  # graphs whose local program named a symbol around a user dim (`B_dp_2` beside `B_dp`)


CLASH_RATE = 0.25


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


def clashing_names(g: FuzzGraph, binding: dict, mesh, rng) -> tuple[FuzzGraph, dict]:
    """The graph with a user dim named as a dim of it split over a mesh axis once was locally (`B_dp`
    beside B), bound to another value than B / dp, so that a local symbol taking the name shows as a
    wrong output or a binding error. The graph's other dim (T) is renamed so; a graph without one gets
    an input of its own with that dim, summed over it."""
    axes = [a for a, n in mesh.axes if n > 1]
    used = [
        s
        for s in SYMBOLS
        if any(s in spec.shape for spec in g.inputs) or any(f"'{s}'" in e for _, e in g.lines)
    ]
    if not axes or not used:
        return g, binding
    axis = axes[int(rng.integers(len(axes)))]
    kept = used[int(rng.integers(len(used)))]
    (old,) = set(SYMBOLS) - {kept}
    new, value = f"{kept}_{axis}", binding[old]
    if value == binding[kept] // mesh.sizes[axis]:
        value += int(np.lcm.reduce([n for _, n in mesh.axes]))  # still a multiple of every axis
    if old in used:
        quoted = re.compile(rf"""(['"]){old}\1""")  # dims appear in code as quoted names: x.expand('B', -1)
        inputs = [replace(spec, shape=tuple(new if d == old else d for d in spec.shape)) for spec in g.inputs]
        lines, outputs, ops = (
            [(var, quoted.sub(rf"\g<1>{new}\g<1>", e)) for var, e in g.lines],
            g.outputs,
            g.ops,
        )
    else:
        extra = InputSpec("xclash", (new, 3))
        inputs, lines = g.inputs + [extra], g.lines + [("vclash", f"{extra.name}.sum(0)")]
        outputs, ops = g.outputs + ["vclash"], g.ops + ["clash"]
    return replace(g, inputs=inputs, lines=lines, outputs=outputs, ops=ops), {**binding, new: value}


def check_sharded(count: int, seed: int, mesh, backend: str = "numpy") -> ShardedResult:
    """`count` fuzzed graphs on `mesh` with random input shardings; mismatches name the graph's code."""
    import refcomp as rc
    result = ShardedResult()
    rng = np.random.default_rng([seed, 1_000_003])
    clash_rng = np.random.default_rng([seed, 2_000_003])  # its own stream: the other draws stay as they were
    step = int(np.lcm.reduce([n for _, n in mesh.axes]))
    for index in range(count):
        g = generate(seed, index)
        binding = {s: step * int(rng.integers(1, 3)) for s in SYMBOLS}
        if clash_rng.random() < CLASH_RATE:
            g, binding = clashing_names(g, binding, mesh, clash_rng)
        outputs = g.build("")
        binding = own_dims(outputs.values(), binding)
        feeds = g.feeds("", binding, 0)
        try:
            want64 = rc.evaluate(outputs, feeds, dims=binding, precision="float64")
            want32 = rc.evaluate(outputs, feeds, dims=binding, precision="float32")
        except RefcompError:
            continue
        draws = {
            "xclash": clash_rng,
            "vclash": clash_rng,
        }  # the added input and output: the others draw as before
        specs = {
            spec.name: random_spec(draws.get(spec.name, rng), tuple(spec.shape), binding, mesh)
            for spec in g.inputs
        }
        result.sharded_inputs += sum(any(a is not None for a in s) for s in specs.values())
        laid = {}  # half the outputs laid out at random (rc.shard): the moves between layouts are exercised
        for key, tensor in outputs.items():
            if tensor.shape and draws.get(key, rng).random() < 0.5:
                laid[key] = random_spec(draws.get(key, rng), tuple(tensor.shape), binding, mesh)
                outputs[key] = rc.shard(tensor, laid[key])
        try:
            prog = rc.spmd.compile(outputs, mesh, shardings=specs, search=False)
            got = prog.run(feeds, backend=backend, dims=binding)
        except RefcompError as exc:
            result.mismatches.append(f"graph {seed}:{index} with {specs}, outputs laid out {laid}, raised "
                                     f"{type(exc).__name__}: {exc}\n{g.code()}")
            continue
        result.collectives.update(c.kind for c in prog.collectives)
        result.clashes += any(name != f"{d}_{a}" for name, (d, a) in prog.local.local_symbols.items())
        for key, tensor in outputs.items():
            result.compared += 1
            message = compare(got[key], want64[key], want32[key], storage_of(tensor))
            if message is not None:
                result.mismatches.append(
                    f"graph {seed}:{index} output {key} with {specs}, outputs laid out {laid}: "
                    f"{message}\n{g.code()}"
                )
    return result
