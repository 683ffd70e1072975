"""Loading a saved program: its graph and schedule read from the file, its kernels generated again.

A file is untrusted input (exec.saved): the kernels it lists are only compared with the ones this
refcomp generates from its graph and schedule, never built from its text.
"""
from __future__ import annotations

from typing import Mapping

from ..codegen.lower import lower_groups, lower_plain
from ..errors import RefcompError
from ..exec.program import Program
from ..exec.saved import ProgramFileError, kernel_listing, read_program, rebuild_parts, structure_json
from ..ops.graph import flatten_outputs
from ..ops.primitives import Node
from ..search.cost import H200
from ..search.evaluate import lowering_plan
from ..search.fusion import Graph
from ..search.pricing import PRICING, plain_prices, price_kernels
from ..search.schedule import DECISIONS, PARAMS_BY_NAME, Schedule
from ..search.search import scheduled
from .assemble import priced


def load_program(path, outputs=None, trusted: bool = False) -> Program:
    """A program saved by Program.save, ready to run on every backend, without search.

    The file's kernels are generated again from its graph and schedule and must equal the ones it
    lists (exec.saved). A file from another refcomp version, or without this user's MAC, is refused
    (`trusted=True` accepts a file saved by another user: see exec.saved). `outputs` (the same
    graph, built again) must be the saved graph, and then serves as the program's reference."""
    name = str(path)
    parts = rebuild_parts(read_program(path, trusted), name, read_schedule)
    saved_outputs, output_nodes, schedule, bindings, explained, listed = parts
    if outputs is not None:
        given = structure_json(outputs, flatten_outputs(outputs)[0])
        if given != structure_json(saved_outputs, flatten_outputs(saved_outputs)[0]):
            raise ProgramFileError(
                f"{name!r} was saved for another graph than the outputs given to load_program: "
                f"compile these outputs instead"
            )
    try:
        kernels, coarse = regenerated(output_nodes, schedule, bindings)
    except (RefcompError, KeyError, IndexError, StopIteration, TypeError, ValueError) as exc:
        raise ProgramFileError(
            f"{name!r}: its schedule does not lower ({type(exc).__name__}: {str(exc)[:200]})"
        ) from exc
    if [kernel_listing(k) for k in kernels] != [
        {f: k.get(f) for f in ("name", "kind", "ops", "launch", "source")}
        for k in listed
        if isinstance(k, dict)
    ]:
        raise ProgramFileError(
            f"{name!r}: its kernels are not the ones refcomp generates from its graph and schedule "
            f"(edited, or written by other code)"
        )
    if coarse is None:  # one kernel per compute node: priced as a fresh search=False program is
        costs, bindings = plain_prices(kernels, output_nodes)
    else:
        costs = price_kernels(kernels, coarse, bindings, H200)
    program = Program(
        saved_outputs if outputs is None else outputs,
        priced(kernels, costs),
        output_nodes,
        PRICING,
        bindings,
        schedule=schedule,
    )
    program.saved_explain = explained
    return program


def regenerated(output_nodes: list[Node], schedule, bindings: Mapping[str, int]):
    """The kernels (and their graph-level costs; None without a schedule) that `schedule` makes of
    the compiled graph."""
    if schedule is None:
        return lower_plain(output_nodes), None
    graph = Graph(list(output_nodes))
    made = scheduled(graph, schedule, bindings, H200, checked=False)  # generating them below checks them
    if made is None:
        raise ValueError("a fusion its graph does not allow")
    groups, costs = made
    return lower_groups(lowering_plan(groups, schedule), schedule.inline, graph.names), costs


def read_schedule(spec, node_id, name: str) -> Schedule:
    """The Schedule a file's `spec` (Schedule.indexed) describes; `node_id(i)` is its node i's id."""
    decided = {d.name: frozenset(node_id(i) for i in spec[d.name]) for d in DECISIONS}
    params = []
    for root, param, value in spec["params"]:
        if param not in PARAMS_BY_NAME or not any(
            value in choices for choices in PARAMS_BY_NAME[param].choices.values()
        ):
            raise ProgramFileError(
                f"{name!r}: the kernel parameter {str(param)[:40]}={str(value)[:40]} is not one refcomp sets"
            )
        params.append(((node_id(root), param), value))
    return Schedule(**decided, params=tuple(sorted(params)))
