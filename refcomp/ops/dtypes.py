"""Element types: what a node's values are, how many bytes a stored element takes, and how a kernel
computes, loads, stores and rounds it. Defined once, here.

Each type computes in one of three *kinds*, as a GPU does:
- float: float32, and the 16-bit *storage* types float16 and bfloat16, whose nodes compute in float32
  and round (to nearest, ties to even) to their type's values; buffers hold the 16-bit patterns and
  readers widen them exactly. The rounding is part of the node's meaning, so the NumPy reference,
  a kernel that stores the node and one that recomputes it inline all round it at the same place.
- double: float64, computed in double.
- int: int64 and int32, computed exactly in 64-bit two's complement; an int32 node wraps its value
  to 32 bits (its "rounding"), as PyTorch's int32 arithmetic does.

Types combine as in PyTorch (`promote`): the highest category wins (integer < float), and within it
the widest type; float16 with bfloat16 is float32. Scalar constants and index ramps (Constant, Iota:
"weak" values, like Python numbers in PyTorch) never widen a result within their category, but an
integer tensor with a weak float is float32, PyTorch's default float type.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


FLOAT, DOUBLE, INT = "float", "double", "int"  # the kinds of arithmetic a node computes in
C_COMPUTE = {FLOAT: "float", DOUBLE: "double", INT: "long long"}  # the C type of a computed value
NUMPY_COMPUTE = {DOUBLE: np.float64, INT: np.int64}  # float: the reference's precision (float32 or 64)


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int  # bytes per stored element
    c_storage: str  # the C type of one stored element
    c_load: str  # C expression: the stored element {0} as a computed value
    c_store: str  # C expression: the computed value {0} as a stored element
    c_round: str  # C expression: the computed value {0} rounded to this type's values
    kind: str = FLOAT

    @property
    def is_float(self) -> bool:
        """A type of the float kind (computed in float32): what refcomp computed before other kinds."""
        return self.kind == FLOAT

    @property
    def is_int(self) -> bool:
        return self.kind == INT

    @property
    def c_compute(self) -> str:
        return C_COMPUTE[self.kind]

    @property
    def is_narrow(self) -> bool:
        """A 16-bit storage type, whose values are rounded floats."""
        return self.itemsize == 2


DTYPES: dict[str, DType] = {
    t.name: t
    for t in [
        DType("float32", 4, "float", "{0}", "{0}", "{0}"),
        DType("int32", 4, "int", "(long long){0}", "(int)({0})", "(long long)(int)({0})", INT),
        DType("int64", 8, "long long", "{0}", "{0}", "{0}", INT),
        DType("float64", 8, "double", "{0}", "{0}", "{0}", DOUBLE),
        DType(
            "float16",
            2,
            "unsigned short",
            "rc_half_to_float({0})",
            "rc_float_to_half({0})",
            "rc_round_half({0})",
        ),
        DType(
            "bfloat16",
            2,
            "unsigned short",
            "rc_bf16_to_float({0})",
            "rc_float_to_bf16({0})",
            "rc_round_bf16({0})",
        ),
    ]
}
FLOAT_DTYPES = tuple(name for name, t in DTYPES.items() if t.is_float)


# PyTorch's order within a category: a wider type wins (float16 with bfloat16 is float32)
_RANK = {"int32": 0, "int64": 1, "float16": 2, "bfloat16": 2, "float32": 3, "float64": 4}


def promote(names, weak=()) -> str:
    """The result type of an op on strong values of types `names` and weak values of types `weak`
    (see the module docstring)."""
    names = set(names)
    if not names:
        names = {"float32"} if any(not DTYPES[w].is_int for w in weak) or not weak else {"int64"}
    if len(names) == 1:
        result = names.pop()
    elif names == {"float16", "bfloat16"} or names <= {"float16", "bfloat16", "int32", "int64"} and len(
            names - {"int32", "int64"}) > 1:
        result = "float32"
    else:
        result = max(names, key=lambda n: (_RANK[n], n == "float32"))
    if DTYPES[result].is_int and any(not DTYPES[w].is_int for w in weak):
        return "float32"  # an integer tensor with a Python float: PyTorch's default float type
    return result


def kind_of(name: str) -> str:
    return DTYPES[name].kind


def numpy_compute(name: str, precision=np.float32):
    """The NumPy type the reference computes a `name` node in (float kinds: the run's precision)."""
    return NUMPY_COMPUTE.get(DTYPES[name].kind, precision)


# --- NumPy: rounding, and the bit patterns buffers hold ----------------------------------------------
def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0) | (bits >> 16).astype(np.uint16) & 0x8000, rounded)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """`values` (float32 or float64; int64 for an integer type) rounded to the values of dtype `name`,
    in their own precision: an int32 wraps to 32 bits."""
    if name == "int32":
        return values.astype(np.int32).astype(values.dtype)
    if name == "float16":
        with np.errstate(over="ignore"):  # past 65504 is inf, as on a GPU
            return values.astype(np.float16).astype(values.dtype)
    if name == "bfloat16":
        return _bf16_values(_bf16_bits(values.astype(np.float32))).astype(values.dtype)
    return values


def to_storage(values: np.ndarray, name: str) -> np.ndarray:
    """What a buffer of dtype `name` holds for these values (16-bit types: their bit patterns)."""
    if name == "float16":
        with np.errstate(over="ignore"):
            return np.ascontiguousarray(values, dtype=np.float16)
    if name == "bfloat16":
        if values.dtype.name == "bfloat16":  # ml_dtypes' bfloat16 holds the bits already
            return np.ascontiguousarray(values).view(np.uint16)
        return _bf16_bits(np.asarray(values, dtype=np.float32))
    return np.ascontiguousarray(values, dtype=storage_numpy_type(name))


def storage_numpy_type(name: str):
    """The NumPy type a buffer of dtype `name` is downloaded as."""
    return {"float32": np.float32, "int32": np.int32, "int64": np.int64, "float64": np.float64,
            "float16": np.float16, "bfloat16": np.uint16}[name]


def from_storage(stored: np.ndarray, name: str) -> np.ndarray:
    """A downloaded buffer as the user gets it: float16 as np.float16; bfloat16, which NumPy lacks,
    as float32 arrays holding exactly the bfloat16 values."""
    return _bf16_values(stored) if name == "bfloat16" else stored
