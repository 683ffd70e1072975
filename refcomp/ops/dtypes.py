"""Element types: what a node's values are rounded to, how many bytes a stored element takes, and how
a kernel loads and stores it. Defined once, here.

refcomp computes in float32. float16 and bfloat16 are *storage* types, as on a GPU: a node of a
16-bit type computes its value in float32 and rounds it (to nearest, ties to even) to the 16-bit
type's values; its buffer holds the 16-bit patterns, and readers widen them back to float32 exactly.
The rounding is part of the node's meaning, so the NumPy reference, a kernel that stores the node
and a kernel that recomputes it inline all round it at the same place, whatever the fusion.

Types combine as in PyTorch: float16 with float16 stays float16, anything with float32 (or float16
with bfloat16) is float32, and scalar constants and index ramps (Constant, Iota: "weak" values, like
Python numbers in PyTorch) never widen a result.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int  # bytes per stored element
    c_storage: str  # the C type of one stored element
    c_load: str  # C expression: the stored element {0} as a float
    c_store: str  # C expression: the float {0} as a stored element
    c_round: str  # C expression: the float {0} rounded to this type's values

    @property
    def is_float(self) -> bool:
        return self.name != "int32"

    @property
    def is_narrow(self) -> bool:
        """A 16-bit storage type, whose values are rounded floats."""
        return self.itemsize == 2


DTYPES: dict[str, DType] = {
    t.name: t
    for t in [
        DType("float32", 4, "float", "{0}", "{0}", "{0}"),
        DType("int32", 4, "int", "{0}", "{0}", "{0}"),
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


def promote(names) -> str:
    """The result type of an op on values of these float types (see the module docstring)."""
    names = set(names)
    return names.pop() if len(names) == 1 else "float32"


# --- NumPy: rounding, and the bit patterns buffers hold ----------------------------------------------
def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0) | (bits >> 16).astype(np.uint16) & 0x8000, rounded)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """`values` (float32 or float64) rounded to the values of dtype `name`, in their own precision."""
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
    return np.ascontiguousarray(values, dtype=np.int32 if name == "int32" else np.float32)


def storage_numpy_type(name: str):
    """The NumPy type a buffer of dtype `name` is downloaded as."""
    return {"float32": np.float32, "int32": np.int32, "float16": np.float16, "bfloat16": np.uint16}[name]


def from_storage(stored: np.ndarray, name: str) -> np.ndarray:
    """A downloaded buffer as the user gets it: float16 as np.float16; bfloat16, which NumPy lacks,
    as float32 arrays holding exactly the bfloat16 values."""
    return _bf16_values(stored) if name == "bfloat16" else stored
