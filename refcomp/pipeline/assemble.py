"""Assembling a Program from what the stages returned, each called once and in order:

    search result (schedule, kernel groups, their prices from the graph)
      -> codegen.lower.lower_groups: the kernels of the groups
      -> search.pricing.price_kernels: each price refined from the built kernel's own accesses
      -> exec.program.Program: runs the kernels, and shows the prices it was given
"""
from __future__ import annotations

from typing import Sequence

from ..codegen.kernels import Kernel
from ..codegen.lower import lower_groups, lower_plain
from ..exec.program import Program
from ..ops.primitives import Node
from ..search.evaluate import lowering_plan
from ..search.pricing import PRICING, plain_prices, price_kernels
from ..search.search import SearchResult, with_schedule


def lower_schedule(result: SearchResult) -> list[Kernel]:
    """The kernels of the search result's groups under its schedule."""
    return lower_groups(
        lowering_plan(result.groups, result.schedule), result.schedule.inline, result.graph.names
    )


def priced(kernels: Sequence[Kernel], costs) -> list[Kernel]:
    """The kernels, each carrying its price (`kernels[i].cost`)."""
    for kernel, cost in zip(kernels, costs):
        kernel.cost = cost
    return list(kernels)


def searched_program(outputs, result: SearchResult, kernels: list[Kernel]) -> Program:
    """The Program of a search result and its lowered kernels, priced at the search's binding."""
    costs = price_kernels(kernels, result.costs, result.bindings, result.profile)
    return Program(outputs, priced(kernels, costs), result.graph.output_nodes, PRICING, result.bindings,
                   search=result, schedule=result.schedule)


def plain_program(outputs, output_nodes: list[Node]) -> Program:
    """search=False: one kernel per compute node, priced at the default binding."""
    kernels = lower_plain(output_nodes)
    costs, bindings = plain_prices(kernels, output_nodes)
    return Program(outputs, priced(kernels, costs), output_nodes, PRICING, bindings)


def program_for_schedule(outputs, result: SearchResult, schedule) -> Program:
    """The program a search result's graph gives under `schedule` (the chosen one, or a candidate)."""
    result = with_schedule(result, schedule)
    return searched_program(outputs, result, lower_schedule(result))
