"""SPMD: one local program for every device of a mesh, collectives between its stages.

    mesh = rc.Mesh({"dp": 2, "tp": 4})
    x = rc.input("x", ("B", 512), sharding=("dp", None))
    prog = rc.spmd.compile(model(x), mesh)       # weights left unannotated: their shardings are searched
    out = prog.run(feeds)                        # every device's program on the simulated mesh
    out = prog.run(feeds, backend="mpi")         # or this process is one device (mpirun -n 8 python ...)
    prog.collectives                             # what the devices exchange, and what it costs

See docs/spmd.md for the model, the propagation rules and the search.
"""
from ..errors import ShapeError
from ..ops.primitives import make_node
from ..ops.tensor import Tensor, lift
from .collectives import COLLECTIVES, Collective, CollectiveCost
from .mesh import Mesh
from .program import SpmdProgram, compile


def shard(tensor, sharding) -> Tensor:
    """An annotation inside a graph: on a mesh, `tensor` is laid out as `sharding` here (gathered, or
    each device taking its block); a single-device compile copies it, and its search drops the copy."""
    t = lift(tensor)
    if not isinstance(sharding, (tuple, list)) or len(sharding) != t.ndim:
        raise ShapeError(
            f"rc.shard of {t.label}: give one mesh axis name or None per dim ({t.ndim}), got {sharding!r}"
        )
    return Tensor.from_node(make_node("Contiguous", (t.edge,), sharding=tuple(sharding)))


__all__ = ["Mesh", "SpmdProgram", "compile", "shard", "COLLECTIVES", "Collective", "CollectiveCost"]
