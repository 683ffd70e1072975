"""Helpers shared by the tests of fusion rules and templates: random feeds and an emulator check
against the float64 reference at RUN_BINDINGS, and a program with chosen rules forced."""
from __future__ import annotations

import numpy as np

import refcomp as rc
from refcomp import golden
from refcomp.fuzz.check import own_dims
from refcomp.ops.graph import toposort
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.search.cost import H200
from refcomp.search.evaluate import Evaluator
from refcomp.search.fusion_rules import CLEANUP, FUSION
from refcomp.search.schedule import Schedule
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


RULES = {rule.name: rule for rule in FUSION + CLEANUP}


def forced_schedule(outputs, rule_names):
    """(the search result, a schedule of its graph that applies `rule_names` wherever they give a valid
    partition, whatever the cost model prefers, and the set of rules that did apply)."""
    result = rc.compile(outputs, cache=False).search
    graph, sched, applied = result.graph, Schedule(), set()
    evaluator = Evaluator(graph, result.bindings, H200)
    for _ in range(3):
        for node in graph.compute:
            for name in rule_names:
                if RULES[name].applies(graph, sched, node):
                    moved = RULES[name].apply(graph, sched, node)
                    if evaluator.partition(moved) is not None:
                        sched, applied = moved, applied | {name}
    return result, sched, applied


def forced(outputs, rule_names):
    """The searched program's graph under the schedule `forced_schedule` gives, and the rules applied."""
    result, sched, applied = forced_schedule(outputs, rule_names)
    return program_for_schedule(outputs, result, sched), applied


def launch_split_twice(be, prog, kernel, feeds, want) -> None:
    """A program whose `kernel` splits K across blocks, reduces its rows' statistics or finishes a
    reduction of its rows, launched twice on backend `be` into the same buffers: after each run every
    ticket (ws1, ws3, ws4) is back at 0 (the second run combines again) and the outputs are `want` (a
    dict: those of the outputs it names)."""
    bindings, buffers = prog.prepare(be, feeds)
    module = be.load(prog.source, [k.signature for k in prog.kernels])
    for _ in range(2):
        for k, grid, block, args in prog.launches(buffers, bindings):
            module.launch(k.name, grid, block, args)
        be.synchronize()
        scratch = (("ws1", kernel.launch.scratch(bindings)), ("ws3", kernel.launch.row_scratch(bindings)),
                   ("ws4", (0, kernel.launch.tail_tickets(bindings))))
        for ws, (_, count) in scratch:
            if count:
                assert not be.download(buffers[(ws, kernel.name)], (count,), np.uint32).any(), ws
        got = prog.download_outputs(be, buffers, bindings)
        for name, value in (want.items() if isinstance(want, dict) else ((None, want),)):
            np.testing.assert_allclose(got if name is None else got[name], value, **golden.FLOAT32_TOLERANCE)


def sanitized_run(prog, feeds):
    """The program's outputs on the emulator with every load and store bounds-checked (AddressSanitizer)."""
    from refcomp.exec.emulator import EmulatorBackend

    be = EmulatorBackend(sanitize=True)
    bindings, buffers = prog.prepare(be, feeds)
    module = be.load(prog.source, [k.signature for k in prog.kernels])
    for kernel, grid, block, args in prog.launches(buffers, bindings):
        module.launch(kernel.name, grid, block, args)
    be.synchronize()
    return prog.download_outputs(be, buffers, bindings)


def variants_build_with_nvcc(outputs, base, carrying) -> None:
    """The program of `base`'s schedule with the one kernel `carrying(program)` lists unsplit, then
    split K across 4 blocks and 4 slices, compiled by nvcc for sm_90 (skipped, naming why, without
    nvcc)."""
    import pytest
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    for parts in (1, 4):
        prog, _ = reparametrised(outputs, base, carrying, splits=parts, slices=parts)
        assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}


def saved_and_loaded(prog, path):
    """The program saved to `path` and loaded again (its kernels generated afresh): the same source."""
    prog.save(path)
    loaded = rc.load_program(path)
    assert loaded.source == prog.source
    return loaded


# (tile, splits, slices) of a matmul's row-statistics end (matmul_row_stats.cu.j2) that its tests run
ROW_END_VARIANTS = [(16, 1, 1), (32, 1, 1), (16, 4, 1), (16, 3, 4), (32, 16, 1), (16, 1, 4)]


def reparametrised(outputs, base, carrying, **params):
    """(the program of `base`'s schedule with `params` (tile=, splits=, slices=) set on the one kernel
    `carrying(program)` lists, that kernel of the new program)."""
    root = carrying(base)[0].output.id
    sched = base.search.schedule.with_params({(root, name): v for name, v in params.items()})
    prog = program_for_schedule(outputs, base.search, sched)
    (kernel,) = carrying(prog)
    return prog, kernel
