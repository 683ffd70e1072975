"""An ONNX graph's inputs as refcomp values: user inputs, initializers, and inputs with a default.

A graph input that also has an initializer is an input whose feed may override the initializer
(ONNX's rule). A FLOAT, FLOAT16, BFLOAT16 or BOOL one becomes an `rc.input` whose default feed is
the initializer (kept in `weights`), so it is never folded to a Constant, even when its values are
all equal. An integer one, or one some operator needs at import time (a Resize's scales), is read
at import time instead: it is *pinned*, and a feed of it must equal the initializer
(`ImportedModel.feeds` says so, and `import_model(..., constants=...)` fixes another value).
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import RefcompError
from ..ops.tensor import input as rc_input

# Operators that only move an integer input's values (or read its shape): an integer graph input
# whose every path ends in a Cast to FLOAT/BOOL through these is a float mask in disguise.
_MOVES = frozenset({"Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Transpose", "Slice"})
_SHAPE_ONLY = frozenset({"Shape", "Size"})
MAX_EXACT_INT = 1 << 24  # every integer up to this magnitude is exact in float32


def _is_dim(d) -> bool:
    """A dim the user may give in `dims=`: a name, or a non-negative int (not a bool)."""
    return isinstance(d, str) or (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0)


def _symbol_name(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    return name if name and name.isidentifier() and not name[0].isdigit() else f"d_{name}"


def cast_only_inputs(graph) -> set[str]:
    """Integer graph inputs used only through movement ops, Shape, and Casts to FLOAT or BOOL (an
    attention mask fed as int64): refcomp reads them as float32, exactly, and the Cast is a no-op."""
    from . import onnx_ops_core as core
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {vi.name for vi in graph.output}
    eligible = set()
    for vi in graph.input:
        if vi.type.tensor_type.elem_type not in core.ID_TYPES:
            continue
        stack, ok, cast = [vi.name], True, False
        while stack and ok:
            name = stack.pop()
            ok = name not in outputs
            for node in consumers.get(name, ()):
                if node.op_type == "Cast" and any(
                    a.name == "to" and a.i in (core.FLOAT, core.BOOL) for a in node.attribute
                ):
                    cast = True
                elif node.op_type in _MOVES and node.input[0] == name:
                    stack.extend(node.output)
                elif node.op_type not in _SHAPE_ONLY:
                    ok = False
        if ok and cast:
            eligible.add(vi.name)
    return eligible


ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div"})  # integer inputs these read are computed with as int64


def arithmetic_inputs(graph) -> set[str]:
    """Integer graph inputs that integer arithmetic reads (Add, Sub, Mul, Div): refcomp feeds them as
    int64 and computes with them exactly (ops.dtypes), not as int32 Gather ids."""
    from . import onnx_ops_core as core
    ints = {vi.name for vi in graph.input if vi.type.tensor_type.elem_type in core.ID_TYPES}
    return {name for node in graph.node if node.op_type in ARITHMETIC for name in node.input if name in ints}


def input_shape(vi, dims) -> tuple:
    """A graph input's shape: its declared dims, renamed or fixed by `dims=`."""
    tt = vi.type.tensor_type
    if vi.name in dims:
        given = dims[vi.name]
        if isinstance(given, str) or not hasattr(given, "__len__") or not all(_is_dim(d) for d in given):
            raise RefcompError(
                f"dims[{vi.name!r}] = {given!r} must be a shape: a sequence of ints and dim names"
            )
        if tt.HasField("shape") and len(given) != len(tt.shape.dim):
            raise RefcompError(
                f"dims[{vi.name!r}] = {given!r} has rank {len(given)}, but graph input {vi.name!r} "
                f"has rank {len(tt.shape.dim)}"
            )
        return tuple(d if isinstance(d, str) else int(d) for d in given)
    shape = []
    for axis, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        else:
            param = d.dim_param if d.HasField("dim_param") and d.dim_param else f"{vi.name}_{axis}"
            fixed = dims.get(param, param)
            if not _is_dim(fixed):
                raise RefcompError(
                    f"dims[{param!r}] = {fixed!r} (a dim of graph input {vi.name!r}) must be an int or a name"
                )
            shape.append(int(fixed) if not isinstance(fixed, str) else _symbol_name(fixed))
    return tuple(shape)


def add_graph_inputs(imp) -> None:
    """Fill the importer's values with the initializers and graph inputs (see the module docstring)."""
    core = imp.core
    initializers = {t.name: t for t in imp.graph.initializer}
    cast_only, arithmetic = cast_only_inputs(imp.graph), arithmetic_inputs(imp.graph)
    for t in imp.graph.initializer:
        imp.values[t.name] = core.Value(
            t.data_type, static=core.read_tensor(t, f"initializer {t.name!r}"), name=t.name
        )
    for s in imp.graph.sparse_initializer:
        raise RefcompError(f"sparse initializer {s.values.name!r} is not supported")
    for vi in imp.graph.input:
        default = initializers.get(vi.name)
        if default is not None and vi.name not in imp.constants and (
                vi.name in imp.pin or default.data_type not in core.FLOATS | {core.BOOL}):
            imp.pinned[vi.name] = imp.values[vi.name].static
            continue
        imp.names.add(vi.name)
        if not vi.type.HasField("tensor_type"):
            raise RefcompError(
                f"graph input {vi.name!r} is not a tensor ({vi.type.WhichOneof('value')}); "
                f"refcomp imports tensors only"
            )
        etype = vi.type.tensor_type.elem_type if default is None else default.data_type
        if vi.name in imp.constants:
            array = np.asarray(imp.constants[vi.name])
            if array.dtype.kind not in "biuf" and array.dtype.name != "bfloat16":
                raise RefcompError(f"constants[{vi.name!r}] must be a numeric array, got dtype {array.dtype}")
            if etype != core.FLOAT and etype in core.INT_TYPES | {core.BOOL}:
                array = array.astype(core.numpy_dtype(etype))
            imp.values[vi.name] = core.Value(etype, static=array, name=vi.name)
            continue
        if default is not None:  # overridable: the initializer is its default feed, never a folded Constant
            array = imp.values[vi.name].static
            imp.weights[vi.name] = np.ascontiguousarray(array.astype(np.float32))
            shape = array.shape
        else:
            shape = input_shape(vi, imp.dims)
        imp.input_types[vi.name] = core.type_name(etype)
        if etype in core.FLOATS | {core.BOOL}:
            t = rc_input(
                vi.name, shape, core.DTYPE_OF_ETYPE.get(etype, "float32")
            )  # graph_input: a use that needs it static names it (constants=)
        elif vi.name in cast_only:  # read as float32; the Cast to FLOAT is then a no-op
            t = rc_input(vi.name, shape)
            imp.float_ints.add(vi.name)
        elif vi.name in arithmetic:  # computed with exactly, as int64
            t = rc_input(vi.name, shape, dtype="int64")
            imp.int_inputs.add(vi.name)
        elif etype in core.ID_TYPES:
            t = rc_input(vi.name, shape, dtype="int32")
        else:
            raise RefcompError(
                f"graph input {vi.name!r} has element type {core.type_name(etype)}; refcomp computes in "
                f"float32 and float64 (FLOAT, FLOAT16, BFLOAT16, DOUBLE and BOOL inputs, "
                f"INT64/INT32 as Gather indices or static shapes)"
            )
        imp.values[vi.name] = core.Value(etype, tensor=t, name=vi.name, graph_input=vi.name)
        imp.user_inputs[vi.name] = t
