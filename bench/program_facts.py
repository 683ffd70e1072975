"""What bench/search_targets_bench.py records of one compiled program: its kernels and their kinds,
the modeled bytes against the minimum (as refcomp/search/explain.py's cost_table computes it), and,
where nvcc is installed, ptxas's registers and spills for sm_90."""
from __future__ import annotations

from refcomp.errors import RefcompError
from refcomp.exec.nvcc import nvcc_available, nvcc_check
from refcomp.ops.graph import toposort
from refcomp.search.cost import minimum_bytes


def describe(prog) -> dict:
    """Kernels and their kinds; modeled bytes (prog.cost.bytes) against minimum_bytes, as cost_table
    computes them; and the kinds of the kernels that read input `x` (is the first matmul tiled?)."""
    least = minimum_bytes(prog.output_nodes, toposort(list(prog.output_nodes)), prog.cost_bindings)
    reads_x = [
        k.kind
        for k in prog.kernels
        if any(s.node.op.name == "Input" and s.node.attrs.get("name") == "x" for n in k.nodes for s in n.srcs)
    ]
    return {
        "kernels": len(prog.kernels),
        "kinds": [k.kind for k in prog.kernels],
        "names": [k.name for k in prog.kernels],
        "modeled_bytes": prog.cost.bytes,
        "minimum_bytes": least,
        "bytes_ratio": prog.cost.bytes / max(least, 1),
        "kinds_reading_x": reads_x,
        "binding": dict(prog.cost_bindings),
    }


def nvcc_resources(source: str) -> dict:
    """Most registers of any kernel and all spill bytes (stores + loads) for sm_90; None without nvcc."""
    reason = nvcc_available()
    if reason is not None:
        return {"nvcc": reason, "max_registers": None, "spill_bytes": None}
    try:
        kernels = nvcc_check(source).kernels
    except RefcompError as exc:
        return {
            "nvcc": f"nvcc rejected the source: {str(exc)[:300]}",
            "max_registers": None,
            "spill_bytes": None,
        }
    return {
        "nvcc": "sm_90",
        "max_registers": max((r.registers for r in kernels.values()), default=0),
        "spill_bytes": sum(r.spill_store_bytes + r.spill_load_bytes for r in kernels.values()),
        "per_kernel": {
            name: {"registers": r.registers, "spill_bytes": r.spill_store_bytes + r.spill_load_bytes}
            for name, r in kernels.items()
        },
    }
