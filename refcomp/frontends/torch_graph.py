"""What the torch.export importer reads off an ExportedProgram besides its ops: dims, names, provenance.

* **Dims.** torch names its symbolic dims s0, s72, ...; a dim the user declared as
  `torch.export.Dim("B", min=1, max=64)` keeps the user's name, found by pairing the
  `dynamic_shapes` given to export with the program's user inputs (`dim_names`), and a `Dim.AUTO`
  one keeps torch's. Each carries its range from `ep.range_constraints` (`DimTable`).
* **Provenance.** An FX node's `nn_module_stack` names the module that ran it (`h.0.attn`) and its
  `stack_trace` the line of model source that called it; `origin` turns them into the Origin that
  refcomp's kernel names and comments show.
* **Dtypes.** torch's dtypes as the kinds the importer distinguishes (float, bool, int).
"""
from __future__ import annotations

import os
import re
from typing import Mapping, Optional

import sympy

from ..errors import RefcompError
from ..ops.provenance import Origin
from ..symbolic.dims import dim, idiv, imod, symbol

FLOATS = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
INTS = {"int64", "int32", "int16", "int8", "uint8"}
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ')


def dtype_name(dtype) -> str:
    """torch.float32 -> "float32"."""
    return str(dtype).replace("torch.", "")


def kind_of(dtype) -> str:
    """"float", "bool" or "int" for a dtype refcomp holds; RefcompError names any other."""
    name = dtype_name(dtype)
    if name in FLOATS:
        return "float"
    if name == "bool":
        return "bool"
    if name in INTS:
        return "int"
    raise RefcompError(f"dtype {name} is not supported (refcomp computes float32, float16 and bfloat16, with "
                       f"booleans as 0/1 and integers as exact float32 values)")


# --- provenance --------------------------------------------------------------------------------------
def source_line(node) -> str:
    """`model.py:41`: the innermost frame of the node's stack trace outside torch itself (the model's
    own line, not nn.Linear's call of F.linear), or ""."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    ours = [f for f in frames if not f[0].startswith(_torch_dir())]
    path, line = (ours or frames)[-1]
    return f"{os.path.basename(path)}:{line}"


def _torch_dir() -> str:
    import torch
    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def module_path(node) -> str:
    """`h.0.attn`: the innermost module running the node ("" for the exported module itself)."""
    stack = node.meta.get("nn_module_stack") or {}
    for value in reversed(list(stack.values())):
        path = value[0] if isinstance(value, tuple) else ""
        if isinstance(path, str) and path:
            return path
    return ""


def origin(node, op: str) -> Origin:
    """The node's module path (or the ATen op's short name at the top level) and source line."""
    return Origin(module_path(node) or op.split(".")[1], source_line(node))


# --- dims ------------------------------------------------------------------------------------------
def dim_names(module, args, kwargs, dynamic_shapes, ep) -> dict[str, str]:
    """torch's symbol name -> the user's name, for every dim declared as a named torch.export.Dim."""
    import torch
    from torch.utils import _pytree
    if not dynamic_shapes:
        return {}
    combined = _combined(module, args, kwargs)
    if isinstance(dynamic_shapes, Mapping):
        specs = [(combined[key], spec) for key, spec in dynamic_shapes.items() if key in combined]
    else:
        specs = list(zip(combined.values(), dynamic_shapes))
    declared: dict[int, object] = {}  # id(tensor) -> its spec (a dict or sequence of dims per axis)
    for value, spec in specs:
        _pair(value, spec, declared)
    leaves = [
        x for x in _pytree.tree_leaves((tuple(args), dict(kwargs or {}))) if isinstance(x, torch.Tensor)
    ]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    tensor_input = lambda name: isinstance(
        getattr(placeholders.get(name), "meta", {}).get("val"), torch.Tensor
    )  # noqa: E731
    users = [s.arg.name for s in ep.graph_signature.input_specs
             if s.kind.name == "USER_INPUT" and tensor_input(getattr(s.arg, "name", None))]
    names: dict[str, str] = {}
    for leaf, name in zip(leaves, users):
        spec = declared.get(id(leaf))
        fake = placeholders[name].meta.get("val") if name in placeholders else None
        if spec is None or fake is None:
            continue
        items = spec.items() if isinstance(spec, Mapping) else enumerate(spec)
        for axis, d in items:
            if isinstance(d, torch.export.Dim) and type(d) is torch.export.Dim and axis < fake.dim():
                expr = size_expr(fake.shape[axis])
                if isinstance(expr, sympy.Symbol):
                    names[expr.name] = d.__name__
    return names


def _combined(module, args, kwargs) -> dict:
    """The export's arguments by parameter name, as torch pairs them with `dynamic_shapes`."""
    import inspect
    forward = module.forward if hasattr(module, "forward") else module
    bound = inspect.signature(forward).bind(*args, **(kwargs or {}))
    return dict(bound.arguments)


def _pair(value, spec, declared: dict) -> None:
    """Record the spec of each tensor inside `value`, walking containers and specs together."""
    import torch
    stack = [(value, spec)]
    while stack:
        v, s = stack.pop()
        if s is None:
            continue
        if isinstance(v, torch.Tensor):
            declared[id(v)] = s
        elif isinstance(v, (list, tuple)) and isinstance(s, (list, tuple)):
            stack.extend(zip(v, s))
        elif isinstance(v, Mapping) and isinstance(s, Mapping):
            stack.extend((v[k], s[k]) for k in s if k in v)


def size_expr(size):
    """A torch size (int or SymInt) as its SymPy expression over torch's symbols."""
    import torch
    return size.node.expr if isinstance(size, torch.SymInt) else int(size)


class DimTable:
    """torch's symbols as refcomp dims, with their ranges: name -> (min, max or None)."""

    def __init__(self, ep, names: Mapping[str, str], caps: Optional[Mapping[str, int]] = None):
        self.names = dict(names)
        self.ranges: dict[str, tuple] = {}
        for sym, vr in ep.range_constraints.items():
            name = self.names.get(str(sym), str(sym))
            lo, hi = _whole(vr.lower), _whole(vr.upper)
            if caps and name in caps:
                hi = caps[name] if hi is None else min(hi, caps[name])
            self.ranges[name] = (max(lo or 0, 0), hi)

    def dim(self, size, what: str):
        """A torch size as a refcomp dim; RefcompError if its expression has no refcomp meaning."""
        value = self.translate(size_expr(size))
        if value is None:
            raise RefcompError(f"{what}: the size {size} is not a dim refcomp can express")
        return value

    def shape(self, sizes, what: str) -> tuple:
        return tuple(self.dim(n, what) for n in sizes)

    def translate(self, e):
        """A SymPy expression over torch's symbols as one over refcomp's (FloorDiv and Mod become idiv
        and imod), or None where refcomp has no counterpart."""
        if isinstance(e, int):
            return e
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            return symbol(self.names.get(e.name, e.name))
        name = type(e).__name__
        args = [self.translate(a) for a in e.args]
        if any(a is None for a in args):
            return None
        if e.is_Add:
            return dim(sympy.Add(*args))
        if e.is_Mul:
            return dim(sympy.Mul(*args))
        if e.is_Pow and isinstance(args[1], int) and args[1] > 0:
            return dim(args[0] ** args[1])
        if name == "FloorDiv":
            return dim(idiv(*args))
        if name in ("Mod", "PythonMod"):
            return dim(imod(*args))
        return None

    def input_ranges(self, shape) -> dict:
        """The ranges of an input's symbolic dims, for rc.input(..., ranges=)."""
        return {
            d.name: self.ranges[d.name]
            for d in shape
            if isinstance(d, sympy.Symbol) and d.name in self.ranges
        }


def _whole(v) -> Optional[int]:
    """A range end as an int, or None for torch's infinity."""
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError, AttributeError):  # torch.utils._sympy int_oo
        return None
