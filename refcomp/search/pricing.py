"""The cost model's side of a compiled program: its kernels' prices and the reports that show them.

The search prices kernel groups from the graph; once code generation has built the kernels,
`price_kernels` refines each price from the kernel's own accesses. A Program (exec) is handed the
priced kernels and a `Pricing`, through which it shows prices (explain, cost tables, the profiler's
figures at another binding, the explorer's untaken moves) without importing the search itself.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from .alternatives import UNTAKEN_HEADER, untaken_rows
from .cost import H200, DeviceProfile, KernelCost, elements, kernel_cost
from .explain import cost_table, explain
from .fusion import group_cost
from .search import unfused_costs


def price_kernels(kernels: Sequence, coarse: Sequence[KernelCost], bindings: Mapping[str, int],
                  profile: DeviceProfile) -> list[KernelCost]:
    """Each built kernel priced from its own accesses (`coarse`: the graph's estimate of each).
    Relabelled kernels (a repeated layer's) share their access plan, so each plan is priced once."""
    priced: dict = {}
    out = []
    for kernel, cost in zip(kernels, coarse):
        key = (
            id(kernel.plan),
            kernel.launch,
            cost,
            tuple((n.shape, n.dtype) for n in kernel.reads + (kernel.output,)),
        )
        if kernel.plan is None or key not in priced:
            priced[key] = kernel_cost(kernel, cost, bindings, profile)
        out.append(priced[key])
    return out


def plain_prices(kernels: Sequence, output_nodes) -> tuple[list[KernelCost], dict[str, int]]:
    """The prices of the plain lowering's kernels (search=False), and the binding they are priced at."""
    coarse, bindings = unfused_costs(output_nodes)
    return price_kernels(kernels, coarse, bindings, H200), bindings


class Pricing:
    """What a Program asks the cost model and the search: handed to it by whoever assembles it."""

    def total(self, costs: Sequence[KernelCost]) -> KernelCost:
        """A whole program: its kernels' bytes, flops and times summed."""
        return KernelCost(
            "total",
            f"{len(costs)} kernels",
            sum(c.bytes for c in costs),
            sum(c.flops for c in costs),
            max((c.threads for c in costs), default=0),
            sum(c.time_s for c in costs),
        )

    def explain(self, program) -> str:
        return explain(program)

    def cost_table(self, program) -> list[str]:
        return cost_table(program.kernels, [k.cost for k in program.kernels], program.output_nodes,
                          program.compiled_nodes, program.cost_bindings)

    def untaken(self, result) -> tuple[str, list[str], list[list[str]]]:
        """(what the list claims, its header, one row per move the search did not take)."""
        claim, rows = untaken_rows(result)
        return claim, UNTAKEN_HEADER, rows

    def costs_at(self, program, bindings: Mapping[str, int]) -> tuple[list[KernelCost], str]:
        """The cost model's figures for each kernel at `bindings` (and a note when it cannot re-price:
        a loaded program keeps the costs it was saved with)."""
        count = lambda shape: elements(shape, bindings)  # noqa: E731
        result = program.search
        if result is not None:
            return [
                kernel_cost(
                    k, group_cost(g, result.schedule, count, result.profile, k.name), bindings, result.profile
                )
                for g, k in zip(result.groups, program.kernels)
            ], ""
        if program.saved_explain is None:
            coarse = unfused_costs(program.output_nodes, dims_hint=dict(bindings))[0]
            return [kernel_cost(k, c, bindings, H200) for k, c in zip(program.kernels, coarse)], ""
        binding = ", ".join(f"{k}={v}" for k, v in program.cost_bindings.items()) or "no symbolic dims"
        return [k.cost for k in program.kernels], f"; model figures as saved, at {binding}"


PRICING = Pricing()
