"""The walk over an ExportedProgram's graph that turns each node into refcomp values.

Placeholders first: parameters, buffers and constant tensors become *weight inputs* (`rc.input`s
named by their state-dict name, e.g. `h.0.attn.c_attn.weight`, whose arrays the model feeds), or
static integer values; user inputs become inputs whose symbolic dims carry their torch ranges.
Then every call node in order: SymInt arithmetic on dims, and ATen ops through their table row
(aten_table.ROWS) in a `Call` (aten_call.py), with the node's module and source line as the
provenance of everything it builds. Before anything is built, every op the table lacks is
refused in one error that counts them and names the user's lines.
"""
from __future__ import annotations

import operator
from typing import Optional

import numpy as np
import sympy

from ..errors import RefcompError
from ..ops.creation import integer
from ..ops.provenance import Origin, building
from ..ops.tensor import Tensor
from ..ops.tensor import input as rc_input
from ..symbolic.dims import dim, idiv, imod
from .aten_call import Call
from .aten_table import IGNORED, NOT_MAPPED, TABLE, op_name
from .aten_values import MAX_EXACT, UNKNOWN, IntValue, bound_of, largest
from .torch_graph import DimTable, dtype_name, kind_of, origin, source_line

SYMBOLIC = {operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
            operator.neg: operator.neg, operator.floordiv: idiv, operator.mod: imod}


class Importer:
    """Walks an ExportedProgram (see the module docstring); `run` fills inputs, outputs, weights."""

    def __init__(self, ep, names: dict, caps: Optional[dict] = None):
        self.ep = ep
        self.dims = DimTable(ep, names, caps)
        self.given_caps = dict(caps or {})
        self.caps: dict[str, int] = {}  # dims that integer exactness needs a max for (see cap)
        self.values: dict[str, object] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.inputs: dict[str, object] = {}  # user input name -> Tensor or IntValue
        self.input_types: dict[str, str] = {}  # user input name -> torch dtype name
        self.sources: dict[
            str, tuple[str, str]
        ] = {}  # refcomp input -> (user input, "float" | "bool" | "int")
        self.outputs: dict[str, object] = {}
        self.output_types: dict[str, str] = {}
        self.static_outputs: dict[str, object] = {}
        self.names: set[str] = set()

    def run(self) -> "Importer":
        refuse_missing(self.ep)
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs if hasattr(s.arg, "name")}
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                with building(Origin(node.name, "")):
                    self.values[node.name] = self._placeholder(node, specs.get(node.name))
            elif node.op == "call_function":
                self.values[node.name] = self._call(node)
            elif node.op == "output":
                with building(Origin("output", "")):
                    self._outputs(node)
            else:
                raise RefcompError(
                    f"node {node.name!r} ({node.op} {node.target}) is not supported by refcomp's importer"
                )
        return self

    # --- placeholders ------------------------------------------------------------------------------
    def _placeholder(self, node, spec):
        kind = spec.kind.name if spec is not None else "USER_INPUT"
        if kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            store = self.ep.state_dict if spec.target in self.ep.state_dict else self.ep.constants
            return self._weight(spec.target, store[spec.target])
        if kind != "USER_INPUT":
            raise RefcompError(f"input {node.name!r} is a {kind.lower()}, which refcomp does not import")
        fake = node.meta.get("val")
        if not hasattr(fake, "shape"):
            return fake  # a number export kept as an input: used as the value it was traced with
        shape = tuple(self.dims.dim(n, f"input {node.name!r}") for n in fake.shape)
        if any(not isinstance(n, (int, sympy.Symbol)) for n in shape):
            raise RefcompError(f"input {node.name!r} has the size {shape}: refcomp inputs take plain dims "
                               f"(a derived Dim such as 2 * B is not supported)")
        kind, name, ranges = kind_of(fake.dtype), node.name, self.dims.input_ranges(shape)
        self.input_types[name] = dtype_name(fake.dtype)
        if kind == "int":
            torch_type = dtype_name(fake.dtype)
            ints = self._user_input(name, name, "int", shape, "int32" if torch_type == "int32" else "int64",
                                    ranges)
            value = IntValue(shape, torch_type, tensor=ints, ids=ints, fed=name)
        elif kind == "bool":
            value = self._user_input(name, name, "bool", shape, "float32", ranges).bool()
        else:
            value = self._user_input(name, name, "float", shape, dtype_name(fake.dtype), ranges)
        self.inputs[name] = value
        return value

    def _user_input(self, name, user, conversion, shape, dtype, ranges) -> Tensor:
        name = self.unique_name(name)
        self.sources[name] = (user, conversion)
        return rc_input(name, shape, dtype, ranges=ranges or None)

    def _weight(self, target: str, value):
        """A parameter, buffer or constant: float ones are weight inputs, others static values."""
        array = value.detach().cpu()
        name = dtype_name(array.dtype)
        try:
            kind = kind_of(array.dtype)
        except RefcompError as exc:
            raise RefcompError(f"weight {target!r}: {exc}") from None
        if kind == "float":
            if name == "bfloat16":  # NumPy has no bfloat16: its values as float32 (exact), stored as bfloat16
                array = array.float()
            name_in = self.unique_name(target)
            self.weights[name_in] = np.array(
                array.numpy(), order="C"
            )  # (ascontiguousarray would make 0-d 1-d)
            return rc_input(name_in, tuple(array.shape), dtype_name(value.dtype))
        return IntValue(tuple(array.shape), name, static=array.numpy().copy())

    # --- call nodes -------------------------------------------------------------------------------
    def _call(self, node):
        name = op_name(node.target)
        if name in IGNORED:
            return None
        args = _resolve(node.args, self.values)
        kwargs = {k: _resolve(v, self.values) for k, v in node.kwargs.items()}
        if node.target is operator.getitem:
            return args[0][args[1]]
        if node.target in SYMBOLIC:
            return self._symbolic(node, args)
        row = TABLE[name]
        call = Call(self, node, row)
        with building(origin(node, name)):
            try:
                return call.run(args, kwargs)
            except RefcompError as exc:
                raise call.located(exc) from exc
            except (
                ArithmeticError,
                AttributeError,
                LookupError,
                TypeError,
                ValueError,
                RecursionError,
            ) as exc:
                # the last resort: a graph refcomp's checks missed still fails by its node, not deep inside
                raise call.error(f"cannot be imported ({type(exc).__name__}: {exc})") from exc

    def _symbolic(self, node, args):
        """Python arithmetic on SymInts (sizes): the same arithmetic on refcomp dims."""
        if any(isinstance(a, (Tensor, IntValue)) for a in args):
            raise RefcompError(
                f"node {node.name!r} ({op_name(node.target)}) takes a tensor where refcomp expects sizes"
            )
        result = SYMBOLIC[node.target](*args)
        return dim(result) if isinstance(result, sympy.Basic) else result

    # --- values for converters ----------------------------------------------------------------------
    def float_tensor(self, v: IntValue) -> Tensor:
        """An integer value as a refcomp tensor (an exact int64 one; a boolean's 0/1 flagged), made once."""
        if v.tensor is None:
            if v.positions is not None:
                v.tensor = v.positions.tensor("int64")
            else:
                v.tensor = self._static_tensor(v.static)
            v.bound = bound_of(v)
            if v.dtype == "bool":
                v.tensor = v.tensor.bool()
        return v.tensor

    def _static_tensor(self, array: np.ndarray) -> Tensor:
        """A static integer array as an int64 tensor: a broadcast Constant if all its values agree, else
        a weight of the import's own."""
        flat = array.reshape(-1).astype(np.int64)
        if flat.size == 0 or np.all(flat == flat[0]):
            value = integer(flat[0] if flat.size else 0)
            return value.reshape((1,) * array.ndim).broadcast_to(array.shape) if array.ndim else value
        name = self.unique_name("constant")
        self.weights[name] = np.array(array, dtype=np.int64, order="C")
        return rc_input(name, array.shape, "int64")

    def static_weight(self, array: np.ndarray) -> Tensor:
        """A float32 array the import computed (a static integer tensor, an averaging matrix) as a weight."""
        name = self.unique_name("constant")
        self.weights[name] = np.array(array, dtype=np.float32, order="C")
        return rc_input(name, array.shape)

    def ids_tensor(self, v, rows, call) -> Optional[Tensor]:
        """Index values as int32 ids: a fed input's, or a static array's (negatives wrapped); None if
        they are neither (positions: index by views instead)."""
        if not isinstance(v, IntValue):
            return None
        if v.ids is not None:
            return v.ids
        if v.static is None:  # computed at run time: exact integers, checked before each lookup
            return self.float_tensor(v) if v.positions is None else None
        array = v.static.astype(np.int64)
        if array.size and array.min() < 0:
            if not isinstance(rows, int):
                raise call.error(f"negative static indices need a concrete axis size, not {rows}")
            array = np.where(array < 0, array + rows, array)
        if isinstance(rows, int) and array.size and (array.min() < 0 or array.max() >= rows):
            raise call.error(
                f"indices {array.min()}..{array.max()} are out of range for an axis of size {rows}"
            )
        name = self.unique_name("indices")
        self.weights[name] = array.astype(np.int32)
        return rc_input(name, array.shape, "int32")

    def exact(self, bound, what: str = "an integer tensor") -> None:
        """Refuse integers that may pass 2^24 at the dims' largest sizes (float32 holds every integer up to
        it, not beyond); where the bound grows with one dim that has no max, that dim is given one (cap)."""
        ranges = self.dims.ranges
        if largest(bound, ranges) <= MAX_EXACT:
            return
        free = (
            []
            if bound is UNKNOWN
            else [s.name for s in sympy.sympify(bound).free_symbols if ranges[s.name][1] is None]
        )
        if len(free) == 1 and self.cap(free[0], bound):
            return
        if bound is UNKNOWN:
            raise RefcompError(
                f"computes {what} at run time from float32 positions of no known magnitude, which float32 "
                f"may not hold exactly"
            )
        raise RefcompError(
            f"computes {what} at run time from float32 positions with values up to {bound}, beyond 2^24 at "
            f"the dims' largest sizes, where float32 stops holding every integer (a smaller max for the "
            f"dims, torch.export.Dim(..., max=...), may help)"
        )

    def cap(self, name: str, bound) -> bool:
        """Give dim `name`, which has no max, the largest max that keeps `bound` within 2^24 (the other dims
        at their largest); export then imports again with it (torch_export.imported). False if none does."""
        others = {s: self.dims.ranges[s.name][1] for s in sympy.sympify(bound).free_symbols if s.name != name}
        if any(v is None for v in others.values()):
            return False
        expr = sympy.sympify(bound).xreplace(others)
        lo, hi = self.dims.ranges[name][0], MAX_EXACT
        at = lambda n: float(expr.xreplace({s: n for s in expr.free_symbols}))  # noqa: E731
        if at(lo) > MAX_EXACT:
            return False
        while lo < hi:  # the largest n with expr(n) <= 2^24 (expr grows with n)
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if at(mid) <= MAX_EXACT else (lo, mid - 1)
        self.caps[name] = min(lo, self.caps.get(name, lo))
        return True

    def unique_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    # --- outputs ---------------------------------------------------------------------------------
    def _outputs(self, node) -> None:
        """The user outputs, flat as the output node lists them (beside buffer mutations, which inference
        drops): tensors to compute, and what is known at import time (static integers, sizes, None)."""
        specs = list(self.ep.graph_signature.output_specs)
        users = [(spec, arg) for spec, arg in zip(specs, node.args[0]) if spec.kind.name == "USER_OUTPUT"]
        for k, (spec, arg) in enumerate(users):
            name = f"output{k}" if len(users) > 1 else "output"
            value = _resolve(arg, self.values)
            meta = getattr(arg, "meta", {}).get("val")
            if isinstance(value, IntValue) and value.static is not None:
                self.static_outputs[name], self.output_types[name] = value.static, value.dtype
            elif isinstance(value, (IntValue, Tensor)):
                self.outputs[name] = self.float_tensor(value) if isinstance(value, IntValue) else value
                self.output_types[name] = (
                    dtype_name(meta.dtype) if hasattr(meta, "dtype") else self.outputs[name].dtype
                )
            else:  # a size, a number or None
                self.static_outputs[name], self.output_types[name] = value, type(value).__name__


def _resolve(value, values: dict):
    """FX arguments with each node replaced by its imported value (lists and dicts walked)."""
    import torch.fx
    if isinstance(value, torch.fx.Node):
        return values[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, values) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, values) for k, v in value.items()}
    return value


def refuse_missing(ep) -> None:
    """Every op of the program that refcomp lacks, in one error with its count and the user's lines."""
    missing: dict[str, list[str]] = {}
    for node in ep.graph.nodes:
        if node.op == "call_function":
            name = op_name(node.target)
            if (
                name not in TABLE
                and name not in IGNORED
                and node.target not in SYMBOLIC
                and node.target is not operator.getitem
            ):
                missing.setdefault(name, []).append(source_line(node) or node.name)
    if not missing:
        return
    parts = []
    for name, lines in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(dict.fromkeys(lines[:3])) + (", ..." if len(lines) > 3 else "")
        why = f": {NOT_MAPPED[name]}" if name in NOT_MAPPED else ""
        parts.append(f"{name} x{len(lines)} ({shown}){why}")
    training = any(
        word in name for name in missing for word in ("backward", "_functional", "dropout", "_legit.")
    )
    raise RefcompError(
        f"the exported program uses {len(missing)} ATen op{'s' if len(missing) > 1 else ''} refcomp "
        f"does not implement: {'; '.join(parts)} (see docs/torch.md for the op table"
        f"{'; export the module in eval mode' if training else ''})"
    )

