"""The C (CUDA) spelling of what code generation writes outside the templates, in one place.

Each op's expression and a reduction's start value (the `c` and `c_identity` columns of the op
table), how each dtype is stored, loaded, stored back and rounded (the dtype table's C columns),
float literals, and a kernel's parameter list: code generation asks this module for every one of
them, and indexes are printed by `cprint`. A second code target would replace this module, cprint
and the templates, and leave the rest of codegen as it is.
"""
from __future__ import annotations

from ..ops.dtypes import DOUBLE, DTYPES, FLOAT, INT
from .abi import KernelSignature
from .cprint import float_literal

__all__ = [
    "op_expr",
    "node_expr",
    "compute_type",
    "zero",
    "constant",
    "index_as",
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
    "to_index",
    "index_element",
    "value_decl",
    "index_decl",
    "guarded",
]

ZERO = "0.0f"  # what a masked or out-of-range read gives


def op_expr(op, *operands: str, kind: str = FLOAT) -> str:
    """The op applied to its operands' expressions in `kind`'s arithmetic: `Add` of a, b is `(a + b)`."""
    return op.c.of(kind).format(*operands)


def node_expr(node, *operands: str) -> str:
    """A node's op applied to its operands, in the node's arithmetic. An operand of another kind is
    converted explicitly (a Where's condition only selects), and so is a Cast into another kind of
    float, so a value has its type wherever it is inlined."""
    kind = DTYPES[node.dtype].kind
    if node.op.name == "Cast" and node.dtype == "int32" and DTYPES[node.srcs[0].node.dtype].kind != INT:
        return f"rc_to_int32({operands[0]})"  # out of int32's range is int32's lowest, as from int64's
    if kind != INT:
        operands = tuple(
            o if k == 0 and node.op.name == "Where" or DTYPES[s.node.dtype].kind in (kind, INT) and
            node.op.name != "Cast" else converted(o, DTYPES[s.node.dtype].kind, node.dtype)
            for k, (o, s) in enumerate(zip(operands, node.srcs)))
    return op_expr(node.op, *operands, kind=kind)


def converted(value: str, kind: str, dtype: str) -> str:
    """`value`, computed in `kind`, as a value of `dtype`'s (float) kind."""
    if kind == DTYPES[dtype].kind:
        return value
    return f"rc_f64({value})" if DTYPES[dtype].kind == DOUBLE else f"({compute_type(dtype)})({value})"


def reduce_identity(op, kind: str = FLOAT) -> str:
    """A reduction's accumulator start value (`0.0f`, `-INFINITY`, `0LL`)."""
    return op.c_identity.of(kind)


def compute_type(dtype: str) -> str:
    """The C type a value of `dtype` is computed in (float for the 16-bit types)."""
    return DTYPES[dtype].c_compute


def zero(dtype: str) -> str:
    """A zero of `dtype`'s computed type: what a masked read gives."""
    return {"float": ZERO, "double": "0.0", "long long": "0LL"}[compute_type(dtype)]


def constant(printer, dtype: str, value) -> str:
    """A Constant's value as a `dtype` literal (or an expression of the dims)."""
    kind = DTYPES[dtype].kind
    if kind == FLOAT:
        return printer.real(value)
    if kind == INT:
        if not getattr(value, "is_Integer", isinstance(value, int)):
            return printer.int(value)
        return "RC_INT64_MIN" if int(value) == -(2**63) else f"{int(value)}LL"  # (2^63 is no literal)
    return printer.double(value)


def index_as(dtype: str, index: str) -> str:
    """An index (an Iota's position) as a value of `dtype`."""
    return f"({compute_type(dtype)})({index})"


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


def masked(cond: str, value: str, dtype: str = "float32") -> str:
    """`value` where `cond` holds, else 0 (a predicated load: the read happens only under `cond`)."""
    return f"({cond} ? {value} : {zero(dtype)})"


def masked_index(cond: str, value: str) -> str:
    """An index read under `cond`, else index 0."""
    return f"({cond} ? {value} : 0LL)"


def to_index(value: str) -> str:
    return f"(long long)({value})"


def index_element(buffer: str, index: str) -> str:
    """An element of an int32 (or exact-integer float) buffer as a 64-bit index."""
    return f"(long long){element(buffer, index)}"


def value_decl(name: str, value: str, dtype: str = "float32") -> str:
    return f"const {compute_type(dtype)} {name} = {value};"


def index_decl(name: str, value: str) -> str:
    return f"const long long {name} = {value};"


def guarded(name: str, cond: str, body: list[str], value: str, dtype: str = "float32") -> list[str]:
    """`name` = `value` computed by `body` only where `cond` holds, else 0."""
    return [
        f"{compute_type(dtype)} {name} = {zero(dtype)};",
        f"if ({cond}) {{",
        *("    " + line for line in body),
        f"    {name} = {value};",
        "}",
    ]
