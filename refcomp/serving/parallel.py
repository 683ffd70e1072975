"""Tensor-parallel serving: the engine's step programs compiled for a device mesh (`rc.spmd.compile`).

The decoder's weights get Megatron's layout over the mesh axis, given here rather than searched (at
the sizes of the tests the search rightly finds a tiny model cheaper replicated): attention split by
heads (each device its heads of q, k and v; GPT-2's fused q|k|v weight as "tp:3", each third split
alike), the attention output projection by rows (its partial sums all-reduced), the MLP's first
matmul(s) by columns and its last by rows. Everything else (embeddings, norms, the head, the feeds
of the step) is whole on every device.

The KV pool stays whole on every device too: the pool's Scatter and its pages' Gather have no rule
for a table split along its rows' contents in rc.spmd yet, so the new keys and values are gathered
before they are written (a few hundred bytes a step) and every device writes and reads the whole
pool; the attention's value sum also reads gathered softmax weights. What tensor parallelism splits
here is the weights' memory and the matmuls' work, not the cache's. Under `backend="mpi"` (one process per
device, `mpirun -n <devices>`) each rank runs the
same engine on the same requests, so the host logic, scheduler included, is the same on every rank.
"""
from __future__ import annotations

from ..errors import RefcompError
from .models import Decoder


def megatron_shardings(model: Decoder, axis: str, size: int) -> dict:
    """{weight name: sharding} for the model's blocks split over `axis` of `size` devices."""
    s = model.spec
    if s.heads % size or s.kv_heads % size:
        raise RefcompError(
            f"tensor parallel over {axis}={size}: the model's {s.heads} heads and {s.kv_heads} key/value "
            f"heads must both divide by {size}"
        )
    specs = {}
    for i in range(s.layers):
        if s.family == "gpt2":
            p = f"h.{i}."
            specs.update({
                p + "attn.c_attn.weight": (None, f"{axis}:3"), p + "attn.c_attn.bias": (f"{axis}:3",),
                p + "attn.c_proj.weight": (axis, None),
                p + "mlp.c_fc.weight": (None, axis), p + "mlp.c_fc.bias": (axis,),
                p + "mlp.c_proj.weight": (axis, None),
            })
        else:  # llama: nn.linear's weights are (out, in)
            p = f"layers.{i}."
            for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
                         "mlp.up_proj"):
                specs[p + name + ".weight"] = (axis, None)
            specs[p + "self_attn.o_proj.weight"] = (None, axis)
            specs[p + "mlp.down_proj.weight"] = (None, axis)
    return specs


def mesh_step(outputs, model: Decoder, mesh, hint: dict, backend, device_backend: str):
    """The step's outputs compiled on `mesh` (its one axis splits the model), as a function of the
    feeds, and the SpmdProgram."""
    from ..spmd.mesh import Mesh
    from ..spmd.program import compile as spmd_compile
    if not isinstance(mesh, Mesh) or len(mesh.axes) != 1:
        raise RefcompError(
            f"Engine: mesh must be an rc.Mesh of one axis (e.g. rc.Mesh({{'tp': 2}})), got {mesh!r}"
        )
    from ..ops.graph import flatten_outputs, input_nodes, toposort
    (axis, size), = mesh.axes
    tensors, _ = flatten_outputs(outputs)
    whole = {n.attrs["name"]: (None,) * len(n.shape)
             for n in input_nodes(toposort([t.edge.node for t in tensors]))}
    # every input laid out here (the search then only fuses each stage's kernels)
    program = spmd_compile(outputs, mesh, shardings={**whole, **megatron_shardings(model, axis, size)},
                           dims_hint=hint)

    def run(feeds):
        return program.run(feeds, backend=backend, device_backend=device_backend)

    return run, program
