"""The machinery every ONNX operator module shares: values, the node context, the op registry.

During import each ONNX value is a `Value`, one of:

* **static**: a NumPy array known at import time: an initializer, a Constant node, a folded Shape,
  or anything computed from those by the shape-like ops (Gather, Concat, Unsqueeze, Slice, integer
  arithmetic, ...). Integer arrays may hold SymPy expressions (dtype object) where a symbolic dim
  flowed into them, so `Shape -> Gather -> Concat -> Reshape` works on symbolic batch sizes.
* **a tensor**: a refcomp `Tensor`. Float tensors are FLOAT values; BOOL values are float tensors
  holding 0.0 / 1.0 (refcomp's comparisons produce exactly that); INT64/INT32 values that are not
  static can only be *ids*: graph inputs fed as int32 and used as Gather indices.

Float arithmetic is never folded here: a static float array that meets a computing op becomes a
tensor (`Importer.materialize`), so every float result is computed by refcomp. Integer arithmetic
on static arrays is folded with NumPy, as any shape computation is.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import sympy
from onnx import TensorProto, helper, numpy_helper

from ..errors import RefcompError
from ..ops.tensor import Tensor
from .onnx_positions import Positions

FLOAT, BOOL, INT64, INT32 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64, TensorProto.INT32
# ONNX's float types refcomp holds: FLOAT16 and BFLOAT16 as refcomp's 16-bit storage types, DOUBLE as
# float64 (ops.dtypes)
DTYPE_OF_ETYPE = {FLOAT: "float32", TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16",
                  TensorProto.DOUBLE: "float64"}
ETYPE_OF_DTYPE = {name: etype for etype, name in DTYPE_OF_ETYPE.items()}
FLOATS = frozenset(DTYPE_OF_ETYPE)
INT_TYPES = frozenset({TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                       TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64})
ID_TYPES = frozenset({INT64, INT32})  # integer graph inputs that may be fed at run time as Gather ids
# The most elements an array folded at import time (ConstantOfShape, Range, Expand, Tile, ...) may hold.
# Shape computations stay far below it; a model asking for more would exhaust memory inside NumPy.
MAX_FOLD_ELEMENTS = 2 ** 24
# ONNX's NodeProto.output of optional outputs that are not wanted is the empty string.


def type_name(etype: int) -> str:
    try:
        return TensorProto.DataType.Name(etype)
    except ValueError:
        return f"type#{etype}"


def numpy_dtype(etype: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(etype))


def _byte_size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def read_tensor(proto, what: str) -> np.ndarray:
    """A TensorProto (initializer, Constant or ConstantOfShape value) as an array, or an error naming it."""
    if proto.data_type not in TensorProto.DataType.values() or proto.data_type == TensorProto.UNDEFINED:
        raise RefcompError(
            f"{what} has element type {type_name(proto.data_type)}, which ONNX does not define"
        )
    if proto.data_type == TensorProto.STRING:
        raise RefcompError(f"{what} is a STRING tensor; refcomp imports numeric tensors only")
    if (
        proto.data_location == TensorProto.EXTERNAL
    ):  # onnx_load reads external data in: never from the working folder here
        raise RefcompError(f"{what} keeps its data in an external file that was not loaded")
    try:
        return numpy_helper.to_array(proto)
    except Exception as exc:  # noqa: BLE001 - numpy_helper raises ValueError, KeyError, TypeError, ...
        raise RefcompError(f"{what} cannot be read: {type(exc).__name__}: {exc}") from exc


def onnx_type_of(array: np.ndarray) -> int:
    if array.dtype == object:
        return INT64
    return helper.np_dtype_to_tensor_dtype(array.dtype)


class StaticInputRequired(RefcompError):
    """A graph input is used where refcomp needs a value known at import time (a shape, axes, pads).

    `import_model(..., constants={name: array})` fixes it; the ONNX backend does so automatically,
    specialising the model on the values it is run with.
    """

    def __init__(self, message: str, input_name: str):
        super().__init__(message)
        self.input_name = input_name


@dataclass(eq=False)
class Value:
    etype: int
    static: Optional[np.ndarray] = None
    tensor: Optional[Tensor] = None
    name: str = ""
    graph_input: Optional[str] = None  # the graph input the values were read from (moves keep it)
    positions: Optional[Positions] = None  # an integer tensor affine in its indices (onnx_positions)

    def __post_init__(self):
        if (
            self.tensor is not None and self.etype in FLOATS
        ):  # a float tensor's ONNX type is its dtype (promotion decides)
            self.etype = ETYPE_OF_DTYPE[self.tensor.dtype]
        # indexing a 1-D array of dims with a scalar (Gather of Shape at index 0) gives the dim itself,
        # an int or a SymPy symbol: a static value is always an array, 0-d for a scalar
        if self.static is not None and not isinstance(self.static, np.ndarray):
            self.static = np.asarray(
                self.static, dtype=object if isinstance(self.static, sympy.Basic) else None
            )
        if self.static is not None and self.static.dtype == object:
            self.static = concrete_ints(self.static)

    @property
    def is_static(self) -> bool:
        return self.static is not None

    @property
    def shape(self) -> tuple:
        if self.positions is not None:
            return self.positions.shape
        return tuple(self.static.shape) if self.static is not None else tuple(self.tensor.shape)

    @property
    def exact_ints(self) -> bool:
        """An integer tensor computed at run time that refcomp holds as exact float32 values: positions,
        or an integer input read as float (frontends.onnx.cast_only_inputs)."""
        return self.etype in INT_TYPES and (self.positions is not None or
                                            (self.tensor is not None and self.tensor.dtype == "float32"))

    @property
    def integer_tensor(self) -> bool:
        """An integer tensor computed at run time exactly, in an integer type (ops.dtypes)."""
        return self.etype in INT_TYPES and self.tensor is not None and self.tensor.dtype in ("int64", "int32")

    @property
    def ndim(self) -> int:
        return len(self.shape)


def static_value(array, etype: Optional[int] = None) -> Value:
    array = np.asarray(array)
    return Value(onnx_type_of(array) if etype is None else etype, static=array)


def float_value(t: Tensor) -> Value:
    return Value(FLOAT, tensor=t)


def bool_value(t: Tensor) -> Value:
    return Value(BOOL, tensor=t)


def is_int_array(array: np.ndarray) -> bool:
    return array.dtype == object or array.dtype.kind in "iu"


def concrete_ints(array: np.ndarray) -> np.ndarray:
    """An array of dims (dtype object) as int64 when every entry is a concrete int, else as it is.
    Slicing a shape (its last dim, to scale attention) drops the symbolic dims but would keep NumPy's
    object dtype, and an op that refuses symbolic dims (Cast to FLOAT) would refuse these plain ints."""
    flat = array.reshape(-1)
    if array.dtype == object and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) or
                                     isinstance(x, sympy.Basic) and x.is_Integer for x in flat):
        return np.array([int(x) for x in flat], dtype=np.int64).reshape(array.shape)
    return array


def as_dim(x):
    """One entry of a static integer array as a refcomp dim (an int or a SymPy expression)."""
    if isinstance(x, sympy.Basic):
        return int(x) if x.is_Integer else x
    return int(x)


# --- the registry ---------------------------------------------------------------------------------
@dataclass
class OpSpec:
    fn: Callable[["NodeContext"], object]
    attrs: frozenset
    doc: str = ""


OPS: dict[str, OpSpec] = {}


def op(*names: str, attrs: Sequence[str] = (), doc: str = ""):
    """Register a handler for ONNX op types; `attrs` lists every attribute it understands."""
    def register(fn):
        for name in names:
            OPS[name] = OpSpec(fn, frozenset(attrs), doc)
        return fn
    return register


# --- the node context ----------------------------------------------------------------------------
@dataclass
class NodeContext:
    """One node being imported: its attributes, inputs as Values, and error messages that name it."""

    importer: object
    node: object  # onnx.NodeProto
    index: int
    read: set = field(default_factory=set)

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def label(self) -> str:
        return (
            self.node.name or f"#{self.index} (output {self.node.output[0] if self.node.output else '?'!r})"
        )

    @property
    def opset(self) -> int:
        return self.importer.opset

    def error(self, message: str) -> RefcompError:
        return RefcompError(f"ONNX {self.op_type} node {self.label!r}: {message}")

    def attr_error(self, name: str, value, why: str) -> RefcompError:
        return RefcompError(
            f"ONNX {self.op_type} node {self.label!r}: attribute {name!r} = {value!r} "
            f"is not supported ({why})"
        )

    def located(self, exc: RefcompError) -> RefcompError:
        """exc, its message prefixed with this node unless it names one (errors from refcomp's Tensor ops
        do not)."""
        if not str(exc).startswith("ONNX "):
            exc.args = (f"ONNX {self.op_type} node {self.label!r}: {exc}",) + exc.args[1:]
        return exc

    # import-time folding ----------------------------------------------------------------------
    def check_fold(self, shape, dtype, what: str = "the folded result") -> tuple:
        """shape, if an array of it may be built at import time; else an error saying what it would cost."""
        shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise self.error(f"{what} would have a negative dimension: shape {list(shape)}")
        count = math.prod(shape)
        if count > MAX_FOLD_ELEMENTS:
            size = _byte_size(count * np.dtype(dtype).itemsize)
            raise self.error(
                f"{what} of shape {list(shape)} would be built at import time and hold {count:,} elements "
                f"({size}); refcomp folds at most {MAX_FOLD_ELEMENTS:,} elements (MAX_FOLD_ELEMENTS)"
            )
        return shape

    def check_fold_broadcast(self, arrays, what: str = "the folded result") -> tuple:
        """The broadcast shape of static arrays about to be combined by NumPy, checked by check_fold."""
        try:
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError:
            raise self.error(
                f"static inputs of shapes {[a.shape for a in arrays]} do not broadcast"
            ) from None
        return self.check_fold(shape, max((a.dtype for a in arrays), key=lambda d: d.itemsize), what)

    # attributes -------------------------------------------------------------------------------
    def has_attr(self, name: str) -> bool:
        return any(a.name == name for a in self.node.attribute)

    def attr(self, name: str, default=None):
        for a in self.node.attribute:
            if a.name == name:
                if a.ref_attr_name:
                    raise self.attr_error(
                        name, a.ref_attr_name, "attribute references inside functions are not supported"
                    )
                value = helper.get_attribute_value(a)
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "replace")
                if isinstance(value, list):
                    value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
                return value
        return default

    def int_attr(self, name: str, default: Optional[int] = None) -> Optional[int]:
        value = self.attr(name, default)
        return None if value is None else int(value)

    def float_attr(self, name: str, default: Optional[float] = None) -> Optional[float]:
        value = self.attr(name, default)
        return None if value is None else float(value)

    def ints_attr(self, name: str, default=None) -> Optional[list]:
        value = self.attr(name, default)
        return None if value is None else [int(v) for v in value]

    # inputs -----------------------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        return len(self.node.input)

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def value(self, i: int) -> Value:
        if not self.has(i):
            raise self.error(f"input {i} is required but missing")
        return self.importer.lookup(self.node.input[i], self)

    def values(self) -> list[Value]:
        return [self.value(i) for i in range(self.n_inputs) if self.has(i)]

    def tensor(self, i: int, types=(FLOAT,)) -> Tensor:
        """Input i as a refcomp float tensor (static arrays are materialised)."""
        return self.as_tensor(self.value(i), f"input {i} ({self.node.input[i]!r})", types)

    def as_tensor(self, v: Value, what: str, types=(FLOAT,)) -> Tensor:
        if v.etype not in types and not ((v.exact_ints or v.etype in FLOATS) and FLOAT in types):
            allowed = "/".join(type_name(t) for t in types)
            if v.etype in INT_TYPES and v.tensor is not None:
                raise self.error(
                    f"{what} is an {type_name(v.etype)} tensor computed at run time; refcomp computes in "
                    f"float32 and uses integer inputs only as Gather indices or as static shape values"
                )
            raise self.error(
                f"{what} has element type {type_name(v.etype)}; this operator supports {allowed} "
                f"(refcomp computes in float32)"
            )
        return self.importer.materialize(v)

    def static(self, i: int, what: str = "") -> np.ndarray:
        return self.static_of(self.value(i), what or f"input {i} ({self.node.input[i]!r})")

    def static_of(self, v: Value, what: str) -> np.ndarray:
        if v.static is not None:
            return v.static
        if v.graph_input is not None:
            raise StaticInputRequired(
                f"ONNX {self.op_type} node {self.label!r}: {what} must be static "
                f"(an initializer, a Constant or a folded "
                f"Shape), but it comes from graph input {v.graph_input!r} at run time; pass "
                f"constants={{{v.graph_input!r}: ...}} to import_model to fix its value",
                v.graph_input,
            )
        raise self.error(f"{what} must be static (an initializer, a Constant or a folded Shape), "
                         f"but it is computed at run time")

    def static_ints(self, i: int, what: str = "", symbolic: bool = False) -> list:
        array = self.static(i, what)
        what = what or f"input {i} ({self.node.input[i]!r})"
        if not is_int_array(array):
            raise self.error(f"{what} must be an integer tensor, got {array.dtype}")
        out = [as_dim(x) for x in array.reshape(-1)]
        if not symbolic and any(not isinstance(x, int) for x in out):
            raise self.error(f"{what} = {out} must be concrete ints here (it holds symbolic dims)")
        return out

    def optional_static_ints(self, i: int, what: str = "", symbolic: bool = False) -> Optional[list]:
        return self.static_ints(i, what, symbolic) if self.has(i) else None

    def axis(self, axis: int, ndim: int, what: str = "axis") -> int:
        if not isinstance(axis, numbers.Integral) or not -ndim <= axis < max(ndim, 1):
            raise self.error(f"{what} {axis} is out of range for rank {ndim}")
        return int(axis) % ndim if ndim else 0

    def axes(self, axes: Sequence[int], ndim: int, what: str = "axes") -> list[int]:
        if ndim == 0 and len(axes):
            raise self.error(f"{what} {list(axes)} given for a scalar, which has no axes")
        out = [self.axis(a, ndim, what) for a in axes]
        if len(set(out)) != len(out):
            raise self.error(f"{what} {list(axes)} repeats an axis")
        return out

    # outputs ----------------------------------------------------------------------------------
    @property
    def n_outputs(self) -> int:
        return sum(1 for o in self.node.output if o)

    def wants_output(self, k: int) -> bool:
        return k < len(self.node.output) and self.node.output[k] != ""
