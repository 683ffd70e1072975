"""SPMD: one local program for every device of a mesh, collectives between its stages.

    mesh = rc.Mesh({"dp": 2, "tp": 4})
    x = rc.input("x", ("B", 512), sharding=("dp", None))
    prog = rc.spmd.compile(model(x), mesh)       # weights left unannotated: their shardings are searched
    out = prog.run(feeds)                        # every device's program on the simulated mesh
    out = prog.run(feeds, backend="mpi")         # or this process is one device (mpirun -n 8 python ...)
    prog.collectives                             # what the devices exchange, and what it costs

See docs/spmd.md for the model, the propagation rules and the search.
"""
from .collectives import COLLECTIVES, Collective, CollectiveCost
from .mesh import Mesh
from .program import SpmdProgram, compile

__all__ = ["Mesh", "SpmdProgram", "compile", "COLLECTIVES", "Collective", "CollectiveCost"]
