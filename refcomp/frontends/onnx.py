"""Import ONNX models as refcomp graphs (users reach it as `rc.onnx`, refcomp/onnx.py, which adds
`compile` and `run`: the frontend sits below the driver and never calls it).

    m = rc.onnx.import_model("model.onnx", dims={"batch": "B"})
    out = rc.evaluate(m.outputs, m.feeds({"x": x}))           # NumPy reference
    out = rc.compile(m.outputs).run(m.feeds({"x": x}))        # generated CUDA
    out = m.run({"x": x}, backend="emulator")                 # the same, with ONNX dtypes back

Initializers become *weight inputs*: `rc.input`s named after the initializer, whose arrays live in
`m.weights` and are merged into the feeds by `m.feeds(user_feeds)` (a user feed of the same name
overrides one). refcomp has no array-constant op, and a weight input keeps the generated program
independent of the weight values. Initializers that hold a single repeated value become scalar
Constants, and integer initializers used as shapes, axes or pads are read at import time and never
become tensors. A graph input with an initializer is overridable, so it stays an input whose
default feed is the initializer (onnx_inputs.py). See docs/onnx.md for the operator table and the
design.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..errors import FeedError, RefcompError
from ..reference.reference import evaluate
from ..ops.creation import integer
from ..ops.graph import toposort
from ..ops.tensor import Tensor, constant
from ..ops.tensor import input as rc_input
from .onnx_inputs import MAX_EXACT_INT, add_graph_inputs
from .onnx_load import MIN_OPSET, check_defined, check_supported, default_opset, load  # noqa: F401  (this module's API)


class ImportedModel:
    """An imported model: refcomp tensors for its inputs and outputs, and the weights to feed.

    inputs: graph inputs the user feeds (ONNX name -> Tensor), in graph order; one with an initializer
        may be left out (its default is in weights)
    outputs: graph outputs (ONNX name -> Tensor), in graph order; BOOL outputs are 0.0/1.0 floats
    weights: initializer arrays by the name of the weight input that reads them (an input with an
        initializer defaults to it here)
    pinned: graph inputs with an initializer that refcomp read at import time; a feed must equal it
    static_outputs: graph outputs known at import time (e.g. a folded Shape), as arrays
    input_types, output_types: ONNX element type names ("FLOAT", "BOOL", "INT64", ...)
    """

    def __init__(self, importer: "Importer"):
        self.model = importer.model
        self.opset = importer.opset
        self.inputs: dict[str, Tensor] = importer.user_inputs
        self.outputs: dict[str, Tensor] = importer.outputs
        self.weights: dict[str, np.ndarray] = importer.weights
        self.static_outputs: dict[str, np.ndarray] = importer.static_outputs
        self.input_types: dict[str, str] = importer.input_types
        self.output_types: dict[str, str] = importer.output_types
        self.output_names: list[str] = importer.output_names
        self._id_rows: dict[str, set] = importer.id_rows
        self.float_ints: set[str] = importer.float_ints
        self.int_inputs: set[str] = importer.int_inputs
        self.pinned: dict[str, np.ndarray] = importer.pinned
        nodes = toposort([t.node for t in self.outputs.values()])
        self.used_inputs = [n.attrs["name"] for n in nodes if n.op.name == "Input"]

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} opset {self.opset}: inputs {list(self.inputs)}, "
            f"outputs {self.output_names}, {len(self.weights)} weights>"
        )

    def feeds(self, feeds: Optional[Mapping[str, object]] = None) -> dict[str, np.ndarray]:
        """The feeds refcomp needs: user arrays (converted to float32 / int32 ids) plus the weights."""
        feeds = dict(feeds or {})
        for name in feeds:
            if name in self.pinned:
                self._check_pinned(name, feeds[name])
            elif name not in self.input_types and name not in self.weights:
                raise FeedError(
                    f"feed {name!r} matches no input of the ONNX model "
                    f"(its inputs are {list(self.input_types)})"
                )
        out: dict[str, np.ndarray] = {}
        for name in self.used_inputs:
            if (
                name in feeds and name not in self.pinned
            ):  # a pinned feed equals the weight read from its initializer
                out[name] = self._convert(name, feeds[name])
            elif name in self.weights:
                out[name] = self.weights[name]
            else:
                raise FeedError(f"ONNX input {name!r} was not fed (feeds given: {sorted(feeds)})")
        return out

    def _check_pinned(self, name: str, value) -> None:
        """A feed of an input whose initializer was read at import time must be that initializer."""
        default = self.pinned[name]
        try:
            same = np.array_equal(np.asarray(value), default, equal_nan=default.dtype.kind == "f")
        except (TypeError, ValueError):  # strings, ragged lists: not the initializer
            same = False
        if not same:
            raise FeedError(
                f"ONNX input {name!r} has an initializer that refcomp read at import time (it fixes a "
                f"shape or another static value), so a feed may not change it; import the model with "
                f"constants={{{name!r}: array}} to use another value"
            )

    def _convert(self, name: str, value) -> np.ndarray:
        array = np.asarray(value)
        kind = self.input_types.get(name, "FLOAT")
        if kind == "BOOL":
            if array.dtype != np.bool_:
                raise FeedError(f"ONNX input {name!r} is BOOL, but the fed array has dtype {array.dtype}")
            return array.astype(np.float32)
        if kind in ("INT64", "INT32"):
            if array.dtype.kind not in "iu":
                raise FeedError(f"ONNX input {name!r} is {kind}, but the fed array has dtype {array.dtype}")
            if name in self.float_ints:
                if array.size and np.abs(array).max() > MAX_EXACT_INT:
                    raise FeedError(
                        f"ONNX input {name!r} is read as float32 (it is only cast to float), but holds "
                        f"{np.abs(array).max()}, beyond the integers float32 holds exactly (2^24)"
                    )
                return np.ascontiguousarray(array, dtype=np.float32)
            if name in self.int_inputs:  # computed with as int64: the values as they are
                if array.size and array.dtype == np.uint64 and array.max() > np.iinfo(np.int64).max:
                    raise FeedError(f"ONNX input {name!r}: values do not fit in int64")
                return np.ascontiguousarray(array, dtype=np.int64)
            rows = self._id_rows.get(name, set())
            if array.size and array.min() < 0:
                if len(rows) != 1 or not isinstance(next(iter(rows)), int):
                    raise FeedError(f"ONNX input {name!r}: negative Gather indices need one known axis size, "
                                    f"but this input indexes axes of sizes {sorted(map(str, rows))}")
                array = np.where(array < 0, array + next(iter(rows)), array)
            if array.size and (array.min() < np.iinfo(np.int32).min or array.max() > np.iinfo(np.int32).max):
                raise FeedError(f"ONNX input {name!r}: indices do not fit in int32")
            return array.astype(np.int32)
        if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
            raise FeedError(f"ONNX input {name!r} is {kind}, but the fed array has dtype {array.dtype}")
        if kind == "DOUBLE":
            array = np.asarray(array, dtype=np.float64)
        elif not (
            array.dtype.name in ("float16", "bfloat16") and kind != "FLOAT"
        ):  # 16-bit feeds of 16-bit inputs go in as they are
            array = np.asarray(array, dtype=np.float32)
        return array if array.flags.c_contiguous else array.copy()

    def dims_for(self, feeds, dims: Optional[Mapping[str, int]] = None) -> Optional[Mapping[str, int]]:
        """The dims to run at: the given ones (the feeds' shapes bind the rest)."""
        return dims

    def finish(
        self, results: Mapping[str, np.ndarray], feeds: Mapping[str, np.ndarray], dims
    ) -> dict[str, np.ndarray]:
        from ..symbolic.dims import evaluate_dim
        out = {}
        bindings = dict(dims or {})
        if any(a.dtype == object for a in self.static_outputs.values()):
            import sympy
            for name, t in self.inputs.items():
                if name in feeds:
                    for want, got in zip(t.shape, np.shape(feeds[name])):
                        if isinstance(want, sympy.Symbol):
                            bindings.setdefault(want.name, int(got))
        for name in self.output_names:
            if name in self.static_outputs:
                array = self.static_outputs[name]
                if array.dtype == object:
                    array = np.vectorize(lambda d: evaluate_dim(d, bindings), otypes=[np.int64])(array)
                out[name] = array
            elif self.output_types[name] == "BOOL":
                out[name] = np.asarray(results[name]) != 0
            elif self.output_types[name] in (
                "INT64",
                "INT32",
            ):  # integers computed exactly as float32 (ArgMax)
                out[name] = np.asarray(results[name]).astype(
                    np.int64 if self.output_types[name] == "INT64" else np.int32
                )
            elif self.output_types[name] in (
                "FLOAT16",
                "BFLOAT16",
            ):  # ONNX's numpy type (ml_dtypes' bfloat16)
                from onnx import TensorProto, helper
                etype = TensorProto.FLOAT16 if self.output_types[name] == "FLOAT16" else TensorProto.BFLOAT16
                out[name] = np.asarray(results[name], dtype=np.float32).astype(
                    helper.tensor_dtype_to_np_dtype(etype)
                )
            else:
                out[name] = np.asarray(results[name], dtype=np.float64 if self.output_types[name] == "DOUBLE"
                                       else np.float32)
        return out

    def evaluate(
        self, feeds: Optional[Mapping[str, object]] = None, dims: Optional[Mapping[str, int]] = None
    ) -> dict[str, np.ndarray]:
        """Every graph output, by the NumPy reference interpreter, with its ONNX dtype."""
        merged = self.feeds(feeds)
        results = evaluate(self.outputs, merged, dims) if self.outputs else {}
        return self.finish(results, merged, dims)


class Importer:
    """Walks an ONNX graph in order, turning each node into refcomp tensors or static arrays."""

    def __init__(
        self,
        model,
        dims: Optional[Mapping] = None,
        constants: Optional[Mapping[str, object]] = None,
        pin: frozenset = frozenset(),
    ):
        from . import onnx_ops_core as core
        self.core = core
        self.model = model
        self.graph = model.graph
        self.opset = default_opset(
            model
        )  # load() has converted an older opset where an operator's meaning changed
        self.dims = dict(dims or {})
        self.constants = dict(constants or {})
        self.values: dict[str, object] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.user_inputs: dict[str, Tensor] = {}
        self.input_types: dict[str, str] = {}
        self.outputs: dict[str, Tensor] = {}
        self.static_outputs: dict[str, np.ndarray] = {}
        self.output_types: dict[str, str] = {}
        self.output_names: list[str] = []
        self.id_rows: dict[str, set] = {}
        self.float_ints: set[str] = set()  # integer graph inputs read as float32 (cast_only_inputs)
        self.int_inputs: set[str] = set()  # integer graph inputs computed with as int64 (arithmetic_inputs)
        self.names: set[str] = set()
        self.pin = pin  # float inputs with an initializer that an operator needs static (see imported)
        self.pinned: dict[
            str, np.ndarray
        ] = {}  # inputs with an initializer read at import time (onnx_inputs)

    # --- values --------------------------------------------------------------------------------
    def lookup(self, name: str, ctx):
        try:
            return self.values[name]
        except KeyError:
            raise ctx.error(
                f"input {name!r} is not produced by any earlier node, initializer or graph input"
            ) from None

    def unique_name(self, base: str) -> str:
        name, k = base or "const", 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def materialize(self, v) -> Tensor:
        """A static array as a tensor: a broadcast scalar Constant if uniform, else a weight input."""
        core = self.core
        if v.tensor is not None:
            return v.tensor
        if v.positions is not None:
            v.tensor = v.positions.tensor()
            return v.tensor
        array = v.static
        if array.dtype == object:
            if array.size != 1:
                raise RefcompError(
                    f"value {v.name!r} holds symbolic dims {array.tolist()} "
                    f"and cannot be used as a float tensor"
                )
            t = (
                constant(array.reshape(-1)[0]).reshape((1,) * array.ndim)
                if array.ndim
                else constant(array.reshape(-1)[0])
            )
        else:
            if (
                v.etype not in core.FLOATS | {core.BOOL}
                and not np.issubdtype(array.dtype, np.floating)
                and array.dtype != np.bool_
            ):
                raise RefcompError(
                    f"value {v.name!r} of type {core.type_name(v.etype)} cannot be used as a float tensor"
                )
            values = array.astype(np.float32)
            flat = values.reshape(-1)
            uniform = flat.size == 0 or bool(np.all(flat == flat[0])) or bool(np.all(np.isnan(flat)))
            if uniform:
                t = constant(float(flat[0]) if flat.size else 0.0)
                t = t.reshape((1,) * values.ndim).broadcast_to(values.shape) if values.ndim else t
            else:
                name = self.unique_name(v.name)
                self.weights[name] = np.ascontiguousarray(values)
                t = rc_input(
                    name, values.shape, core.DTYPE_OF_ETYPE.get(v.etype, "float32")
                )  # FLOAT16 weights stay 16-bit
        v.tensor = t
        return t

    def integer_tensor(self, v) -> Tensor:
        """An integer value as an exact int64 tensor: its own, or its static array as a constant or weight."""
        if v.integer_tensor:
            return v.tensor
        array = v.static
        if array is None or array.dtype.kind not in "iub":
            raise RefcompError(f"value {v.name!r} is no integer tensor refcomp holds exactly")
        flat = array.reshape(-1).astype(np.int64)
        if flat.size == 0 or np.all(flat == flat[0]):
            value = integer(flat[0] if flat.size else 0)
            return value.reshape((1,) * array.ndim).broadcast_to(array.shape) if array.ndim else value
        name = self.unique_name(v.name)
        self.weights[name] = np.ascontiguousarray(flat.reshape(array.shape))
        return rc_input(name, array.shape, "int64")

    def ids_tensor(self, v, rows, ctx) -> Tensor:
        """Gather indices as an int32 tensor: a weight input if static (negatives wrapped), else the fed
        ids."""
        core = self.core
        if v.static is not None:
            array = v.static
            if not core.is_int_array(array) or array.dtype == object:
                raise ctx.error(f"indices must be concrete integers, got {array.dtype}")
            array = array.astype(np.int64)
            if array.size and array.min() < 0:
                if not isinstance(rows, int):
                    raise ctx.error(
                        f"negative indices need a concrete axis size, but the axis has size {rows}"
                    )
                array = np.where(array < 0, array + rows, array)
            if isinstance(rows, int) and array.size and (array.min() < 0 or array.max() >= rows):
                raise ctx.error(
                    f"indices {array.min()}..{array.max()} are out of range for an axis of size {rows}"
                )
            name = self.unique_name(v.name or "indices")
            self.weights[name] = array.astype(np.int32)
            return rc_input(name, array.shape, dtype="int32")
        if v.tensor is None or v.tensor.dtype != "int32":
            raise ctx.error(f"indices must be INT64/INT32, got {core.type_name(v.etype)}")
        if v.graph_input is not None:
            self.id_rows.setdefault(v.graph_input, set()).add(rows)
        return v.tensor

    # --- the graph -----------------------------------------------------------------------------
    def run(self) -> "Importer":
        core = self.core
        add_graph_inputs(self)
        for index, node in enumerate(self.graph.node):
            ctx = core.NodeContext(self, node, index)
            try:
                results = core.OPS[node.op_type].fn(ctx)
            except RefcompError as exc:
                raise ctx.located(exc)
            except (
                ArithmeticError,
                AttributeError,
                LookupError,
                MemoryError,
                RecursionError,
                TypeError,
                ValueError,
            ) as exc:
                # the last resort: a model refcomp's checks missed still fails by its node, not deep in NumPy
                raise ctx.error(f"cannot be imported ({type(exc).__name__}: {exc})") from exc
            results = list(results) if isinstance(results, (list, tuple)) else [results]
            for k, name in enumerate(node.output):
                if not name:
                    continue
                if k >= len(results) or results[k] is None:
                    raise ctx.error(f"output {k} ({name!r}) is not supported")
                value = results[k]
                if not value.name:
                    value.name = name
                self.values[name] = value
        self._collect_outputs()
        return self

    def _collect_outputs(self) -> None:
        core = self.core
        for vi in self.graph.output:
            name = vi.name
            if name not in self.values:
                raise RefcompError(
                    f"graph output {name!r} is not produced by any node (truncated or corrupt model?)"
                )
            v = self.values[name]
            self.output_names.append(name)
            if v.static is not None and (core.is_int_array(v.static) or v.etype in core.INT_TYPES):
                self.static_outputs[name] = v.static
                self.output_types[name] = core.type_name(v.etype)
                continue
            if v.etype not in core.FLOATS | {core.BOOL} and not v.exact_ints and not v.integer_tensor:
                raise RefcompError(
                    f"graph output {name!r} is an {core.type_name(v.etype)} tensor computed at run time; "
                    f"refcomp computes FLOAT (and BOOL as 0/1) outputs only"
                )
            self.outputs[name] = self.materialize(v)
            self.output_types[name] = core.type_name(v.etype)


def import_model(
    model_or_path,
    dims: Optional[Mapping] = None,
    constants: Optional[Mapping[str, object]] = None,
    base_dir=None,
) -> ImportedModel:
    """Import an ONNX model (a ModelProto, bytes, or a path) of opset 13 or later.

    dims: fixes or renames symbolic dims: {"batch": 8} binds dim_param "batch" to 8, {"batch": "B"}
        renames it, {"x": (8, 3, "H", "W")} gives input "x" a whole shape.
    constants: values for graph inputs that refcomp must know at import time (a Reshape's shape fed
        as a graph input, say); they are folded like initializers and are no longer inputs.
    base_dir: the folder holding the model's external data (a path's own folder by default; bytes
        and a ModelProto read external data only from a folder named here).
    """
    return ImportedModel(imported(load(model_or_path, base_dir), dims, constants))


def imported(
    model, dims: Optional[Mapping] = None, constants: Optional[Mapping[str, object]] = None
) -> Importer:
    """The model walked by an Importer. A float input with an initializer is an input, unless an
    operator needs its value at import time (StaticInputRequired): then it is imported again with
    that input pinned to its initializer, as an initializer without an input would be."""
    from .onnx_ops_core import StaticInputRequired
    overridable = {t.name for t in model.graph.initializer} & {vi.name for vi in model.graph.input}
    pin: frozenset = frozenset()
    while True:
        try:
            return Importer(model, dims, constants, pin).run()
        except StaticInputRequired as exc:
            if (
                exc.input_name not in overridable
                or exc.input_name in pin
                or exc.input_name in (constants or {})
            ):
                raise
            pin |= {exc.input_name}


__all__ = ["import_model", "imported", "load", "ImportedModel", "MIN_OPSET"]
