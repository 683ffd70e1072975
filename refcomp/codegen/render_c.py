"""The C (CUDA) spelling of what code generation writes outside the templates, in one place.

Each op's expression and a reduction's start value (the `c` and `c_identity` columns of the op
table), how each dtype is stored, loaded, stored back and rounded (the dtype table's C columns),
float literals, and a kernel's parameter list: code generation asks this module for every one of
them, and indexes are printed by `cprint`. A second code target would replace this module, cprint
and the templates, and leave the rest of codegen as it is.
"""
from __future__ import annotations

from ..ops.dtypes import DTYPES
from .abi import KernelSignature
from .cprint import float_literal

__all__ = [
    "op_expr",
    "reduce_identity",
    "storage_type",
    "load",
    "store",
    "rounded",
    "parameter_list",
    "float_literal",
    "ZERO",
    "element",
    "masked",
    "masked_index",
    "to_float",
    "to_index",
    "index_element",
    "value_decl",
    "index_decl",
    "guarded",
]

ZERO = "0.0f"  # what a masked or out-of-range read gives


def op_expr(op, *operands: str) -> str:
    """The op applied to its operands' expressions: `Add` of a, b is `(a + b)`."""
    return op.c.format(*operands)


def reduce_identity(op) -> str:
    """A reduction's accumulator start value (`0.0f`, `-INFINITY`)."""
    return op.c_identity


def storage_type(dtype: str) -> str:
    """The C type of one stored element of `dtype`."""
    return DTYPES[dtype].c_storage


def load(dtype: str, element: str) -> str:
    """The stored element `element` of a `dtype` buffer, as a float."""
    return DTYPES[dtype].c_load.format(element)


def store(dtype: str, value: str) -> str:
    """The float `value` as a stored element of `dtype`."""
    return DTYPES[dtype].c_store.format(value)


def rounded(dtype: str, value: str) -> str:
    """The float `value` rounded to `dtype`'s values (itself for float32)."""
    return DTYPES[dtype].c_round.format(value)


def parameter_list(signature: KernelSignature) -> str:
    """A kernel's parameters as its declaration lists them: buffers `__restrict__`, dims by value."""
    parts = []
    for p in signature.params:
        restrict = " __restrict__" if p.ctype.endswith("*") else ""
        parts.append(f"{p.ctype}{restrict} {p.ident}")
    return ", ".join(parts)


# --- expressions and statements of a kernel body ----------------------------------------------------
def element(buffer: str, index: str) -> str:
    return f"{buffer}[{index}]"


def masked(cond: str, value: str) -> str:
    """`value` where `cond` holds, else 0 (a predicated load: the read happens only under `cond`)."""
    return f"({cond} ? {value} : {ZERO})"


def masked_index(cond: str, value: str) -> str:
    """An index read under `cond`, else index 0."""
    return f"({cond} ? {value} : 0LL)"


def to_float(value: str) -> str:
    return f"(float)({value})"


def to_index(value: str) -> str:
    return f"(long long)({value})"


def index_element(buffer: str, index: str) -> str:
    """An element of an int32 (or exact-integer float) buffer as a 64-bit index."""
    return f"(long long){element(buffer, index)}"


def value_decl(name: str, value: str) -> str:
    return f"const float {name} = {value};"


def index_decl(name: str, value: str) -> str:
    return f"const long long {name} = {value};"


def guarded(name: str, cond: str, body: list[str], value: str) -> list[str]:
    """`name` = `value` computed by `body` only where `cond` holds, else 0."""
    return [
        f"float {name} = {ZERO};",
        f"if ({cond}) {{",
        *("    " + line for line in body),
        f"    {name} = {value};",
        "}",
    ]
