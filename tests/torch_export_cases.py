"""Comparisons with PyTorch for every row of refcomp's ATen table (refcomp/frontends/aten_table.py).

CASES maps an op's name to its cases. A case is a function of input tensors that calls the op
(through torch.ops.aten, so the exported program holds that very op), its inputs (float32 inputs
fed at run time, int64 ones fed as ids, bool ones as masks; tensors a case closes over are
constants of the program, static values for refcomp), and whether the inputs' first dims are
dynamic (Dim.AUTO): then integer positions and sizes stay symbolic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

A = torch.ops.aten
_gen = torch.Generator().manual_seed(29)
SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0]


def f(*shape, lo=-2.0, hi=2.0, special=False):
    """A float32 input, uniform in [lo, hi); `special` puts NaN, +-inf and +-0 first."""
    x = torch.rand(shape, generator=_gen) * (hi - lo) + lo
    if special:
        flat = x.reshape(-1)
        flat[:len(SPECIAL)] = torch.tensor(SPECIAL[:flat.numel()])
    return x


def ints(*shape, lo=0, hi=10):
    return torch.randint(lo, hi, shape, generator=_gen)


def mask(*shape):
    return torch.rand(shape, generator=_gen) > 0.5


@dataclass
class Case:
    fn: Callable
    inputs: tuple
    dynamic: object = False  # True: every input's first dim is Dim.AUTO; a tuple: those inputs' only
    rtol: float = 1e-5
    atol: float = 1e-6
    emulator: bool = False  # also run the compiled program on the host emulator


def case(fn, *inputs, **options) -> Case:
    return Case(fn, tuple(inputs), **options)


CASES: dict[str, list[Case]] = {}


def add(name: str, *cases: Case) -> None:
    CASES.setdefault(name, []).extend(cases)


IDX, NEG = torch.tensor([2, 0, 1, 2]), torch.tensor([-1, 0, -3])
IDX2 = torch.tensor([[0, 1], [3, 3]])
INTS, INTS_B = torch.tensor([6, 3, 5]), torch.tensor([3, 5, 6])
ZERO = torch.zeros(())

# --- arithmetic ----------------------------------------------------------------------------------------
add("aten.add.Tensor", case(lambda x, y: A.add.Tensor(x, y, alpha=2), f(3, 4), f(1, 4), emulator=True),
    case(lambda x: A.add.Tensor(x, 1.5), f(2, 3, special=True)))
add("aten.add.Scalar", case(lambda x: A.add.Scalar(x, 2.5), f(3, 4)))
add("aten.sub.Tensor", case(lambda x, y: A.sub.Tensor(x, y), f(3, 4), f(3, 1)),
    case(lambda x, y: A.sub.Tensor(x, y, alpha=0.5), f(3, 4), f(4)))
add("aten.sub.Scalar", case(lambda x: A.sub.Scalar(x, 1), f(3, 4)))
add(
    "aten.rsub.Scalar",
    case(lambda x: A.rsub.Scalar(x, 1.0), f(3, 4)),
    case(lambda x: A.rsub.Scalar(x, 2.0, 3), f(5)),
)
BIG = torch.tensor([2**40 + 1, -(2**62) - 3, 7, -7, 0])  # integers float32 (and float64) would lose
DIVISORS = torch.tensor([3, -3, 2, 2, -5])
add("aten.mul.Tensor", case(lambda x, y: A.mul.Tensor(x, y), f(2, 3, special=True), f(2, 3)),
    case(lambda i: A.mul.Tensor(i, 3), BIG, emulator=True))  # wraps past 2^63, as torch's
add("aten.mul.Scalar", case(lambda x: A.mul.Scalar(x, -0.25), f(4)))
add("aten.div.Tensor", case(lambda x, y: A.div.Tensor(x, y), f(3, 4, special=True), f(3, 4)))
add("aten.div.Scalar", case(lambda x: A.div.Scalar(x, 3.0), f(3, 4)))
add(
    "aten.div.Tensor_mode",
    case(lambda x, y: A.div.Tensor_mode(x, y, rounding_mode="floor"), f(3, 4, lo=-9, hi=9), f(3, 4)),
    case(lambda x, y: A.div.Tensor_mode(x, y, rounding_mode="trunc"), f(3, 4, lo=-9, hi=9), f(3, 4)),
    case(lambda i: A.div.Tensor_mode(i, DIVISORS, rounding_mode="floor"), BIG,
         emulator=True),
    case(lambda i: A.div.Tensor_mode(i, DIVISORS, rounding_mode="trunc"), BIG),
)
add(
    "aten.div.Scalar_mode",
    case(lambda x: A.div.Scalar_mode(x, 0.7, rounding_mode="floor"), f(3, 4, lo=-9, hi=9)),
)
add(
    "aten.pow.Tensor_Scalar",
    case(lambda x: A.pow.Tensor_Scalar(x, 3.0), f(3, 4)),
    case(lambda x: A.pow.Tensor_Scalar(x, 0.5), f(3, 4, lo=0.1, hi=4)),
    case(lambda x: A.pow.Tensor_Scalar(x, 2), f(5)),
)
add("aten.pow.Tensor_Tensor", case(lambda x, y: A.pow.Tensor_Tensor(x, y), f(3, 4, lo=0.1, hi=3), f(3, 4)))
add("aten.pow.Scalar", case(lambda x: A.pow.Scalar(2.0, x), f(3, 4)))
add("aten.neg.default", case(lambda x: A.neg.default(x), f(3, special=True)))
add("aten.abs.default", case(lambda x: A.abs.default(x), f(8, special=True)))
add("aten.reciprocal.default", case(lambda x: A.reciprocal.default(x), f(8, special=True)))
add("aten.fmod.Tensor", case(lambda x, y: A.fmod.Tensor(x, y), f(3, 4, lo=-9, hi=9), f(3, 4)))
add("aten.fmod.Scalar", case(lambda x: A.fmod.Scalar(x, 1.5), f(3, 4, lo=-9, hi=9)))
add("aten.remainder.Tensor", case(lambda x, y: A.remainder.Tensor(x, y), f(3, 4, lo=-9, hi=9), f(3, 4)))
add("aten.remainder.Scalar", case(lambda x: A.remainder.Scalar(x, -1.5), f(3, 4, lo=-9, hi=9)))
add("aten.maximum.default", case(lambda x, y: A.maximum.default(x, y), f(8, special=True), f(8)))
add("aten.minimum.default", case(lambda x, y: A.minimum.default(x, y), f(8, special=True), f(1)))
add(
    "aten.clamp.default",
    case(lambda x: A.clamp.default(x, -0.5, 0.5), f(8, special=True)),
    case(lambda x: A.clamp.default(x, None, 0.0), f(3, 4)),
    case(lambda x: A.clamp.default(x, 1.0, -1.0), f(5)),
)
add(
    "aten.clamp.Tensor", case(lambda x, lo, hi: A.clamp.Tensor(x, lo, hi), f(3, 4), f(3, 1, hi=0), f(4, lo=0))
)
add("aten.atan2.default", case(lambda y, x: A.atan2.default(y, x), f(3, 4), f(3, 4)))

# --- functions -----------------------------------------------------------------------------------------
DOMAINS = {
    "log": (0.05, 5),
    "log2": (0.05, 5),
    "log10": (0.05, 5),
    "log1p": (-0.9, 5),
    "sqrt": (0, 5),
    "rsqrt": (0.05, 5),
    "asin": (-0.95, 0.95),
    "acos": (-0.95, 0.95),
    "atanh": (-0.9, 0.9),
    "acosh": (1.05, 5),
    "tan": (-1.2, 1.2),
    "exp": (-5, 5),
    "expm1": (-5, 5),
    "sinh": (-5, 5),
    "cosh": (-5, 5),
}
for _name in (
    "exp",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "sigmoid",
    "floor",
    "ceil",
    "trunc",
    "sign",
    "silu",
    "relu",
):
    _lo, _hi = DOMAINS.get(_name, (-4, 4))
    _op = getattr(A, _name).default
    add(f"aten.{_name}.default", case(lambda x, op=_op: op(x), f(4, 6, lo=_lo, hi=_hi), rtol=2e-5),
        case(lambda x, op=_op: op(x), f(6, special=True)))
add("aten.gelu.default", case(lambda x: A.gelu.default(x), f(4, 6, lo=-5, hi=5)),
    case(lambda x: A.gelu.default(x, approximate="tanh"), f(4, 6, lo=-5, hi=5)))
add("aten.hardtanh.default", case(lambda x: A.hardtanh.default(x, -0.5, 2.0), f(8, special=True)))
add("aten.leaky_relu.default", case(lambda x: A.leaky_relu.default(x, 0.2), f(8, special=True)))
add("aten.elu.default", case(lambda x: A.elu.default(x), f(3, 5)),
    case(lambda x: A.elu.default(x, 1.6732632423543772, 1.0507009873554805, 1.0), f(3, 5)),
    case(lambda x: A.elu.default(x, 2.0, 1.0, 0.5), f(3, 5)))
add(
    "aten.round.default",
    case(lambda x: A.round.default(x), torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 1.2, float("nan")])),
)
add("aten.round.decimals", case(lambda x: A.round.decimals(x, decimals=2), f(3, 4)))
add("aten.isnan.default", case(lambda x: A.isnan.default(x), f(6, special=True)))
add("aten.isinf.default", case(lambda x: A.isinf.default(x), f(6, special=True)))

# --- selection, comparison, logic ------------------------------------------------------------------------
add(
    "aten.where.self", case(lambda c, x, y: A.where.self(c, x, y), mask(3, 4), f(3, 4, special=True), f(1, 4))
)
add(
    "aten.masked_fill.Scalar",
    case(lambda x, m: A.masked_fill.Scalar(x, m, float("-inf")), f(3, 4), mask(1, 4)),
)
add("aten.masked_fill.Tensor", case(lambda x, m, v: A.masked_fill.Tensor(x, m, v), f(3, 4), mask(3, 4), f()))
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    add(
        f"aten.{_name}.Tensor",
        case(lambda x, y, op=getattr(A, _name).Tensor: op(x, y), f(6, special=True), f(6, special=True)),
        case(
            lambda x, y, op=getattr(A, _name).Tensor: op(x, y),
            ints(3, 4, hi=3).float(),
            ints(4, hi=3).float(),
        ),
    )
    add(f"aten.{_name}.Scalar", case(lambda x, op=getattr(A, _name).Scalar: op(x, 0.0), f(8, special=True)))
for _name in ("and", "or", "xor"):
    add(
        f"aten.logical_{_name}.default",
        case(lambda a, b, op=getattr(A, f"logical_{_name}").default: op(a, b), mask(3, 4), mask(4)),
        case(lambda a, b, op=getattr(A, f"logical_{_name}").default: op(a, b), f(6, special=True), f(6)),
    )
    add(
        f"aten.bitwise_{_name}.Tensor",
        case(lambda a, b, op=getattr(A, f"bitwise_{_name}").Tensor: op(a, b), mask(3, 4), mask(3, 4)),
        case(lambda x, op=getattr(A, f"bitwise_{_name}").Tensor: A.mul.Tensor(x, op(INTS, INTS_B)), f(2, 3)),
    )
    add(
        f"aten.bitwise_{_name}.Scalar",
        case(lambda a, op=getattr(A, f"bitwise_{_name}").Scalar: op(a, True), mask(3, 4)),
    )
add(
    "aten.logical_not.default",
    case(lambda a: A.logical_not.default(a), mask(5)),
    case(lambda a: A.logical_not.default(a), f(6, special=True)),
)
add("aten.bitwise_not.default", case(lambda a: A.bitwise_not.default(a), mask(5)))

# --- casts, copies, creation --------------------------------------------------------------------------------
add(
    "aten._to_copy.default",
    case(lambda x: A._to_copy.default(x, dtype=torch.float16), f(3, 4)),
    case(lambda x: A._to_copy.default(x, dtype=torch.bool), f(6, special=True)),
    case(lambda m: A._to_copy.default(m, dtype=torch.float32), mask(3, 4)),
    case(lambda i: A._to_copy.default(i, dtype=torch.float32), ints(3, 4)),
    case(lambda x: A._to_copy.default(x, dtype=torch.int64), f(3, 4, lo=-50, hi=50)),
    case(
        lambda x: A._to_copy.default(A.arange.start_step(-1, x.shape[0] - 1), dtype=torch.bool),
        f(4),
        dynamic=True,
    ),
    case(
        lambda x: A._to_copy.default(A._to_copy.default(x, dtype=torch.bfloat16), dtype=torch.float32),
        f(3, 4),
    ),
)
for _name in ("clone", "alias", "detach", "lift_fresh_copy"):
    add(f"aten.{_name}.default", case(lambda x, op=getattr(A, _name).default: op(x), f(3, 4)))
add("aten.copy.default", case(lambda d, s: A.copy.default(d, s), f(3, 4), f(4)))
add(
    "aten.scalar_tensor.default",
    case(lambda x: A.mul.Tensor(x, A.scalar_tensor.default(-3.4028234663852886e38)), f(3)),
)
add(
    "aten.full.default",
    case(lambda x: A.add.Tensor(x, A.full.default([3, 4], 0.5)), f(3, 4)),
    case(
        lambda x: A.add.Tensor(x, A.full.default([x.shape[0], 2], 2, dtype=torch.int64)),
        f(3, 2),
        dynamic=True,
    ),
)
add("aten.full_like.default", case(lambda x: A.full_like.default(x, 7.0), f(3, 4)))
add("aten.fill.Scalar", case(lambda x: A.fill.Scalar(x, -1.5), f(3, 4)))
add(
    "aten.arange.start_step",
    case(lambda x: A.mul.Tensor(x, A.arange.start_step(0, 2 * x.shape[0], 2)), f(6), dynamic=True),
    case(lambda x: A.add.Tensor(x, A.arange.start_step(1.0, 2.0, 0.25)), f(4)),
    case(lambda x: A.arange.start_step(0, x.shape[0]), f(5), dynamic=True),
)

# --- views and movement -----------------------------------------------------------------------------
add("aten.view.default", case(lambda x: A.view.default(x, [-1, 2]), f(3, 4)),
    case(lambda x: A.view.default(x, [x.shape[0] * 4]), f(3, 4), dynamic=True))
add("aten._unsafe_view.default", case(lambda x: A._unsafe_view.default(x, [4, 3]), f(3, 4)))
add("aten.reshape.default", case(lambda x: A.reshape.default(x, [2, -1]), f(3, 4)))
add("aten.expand.default", case(lambda x: A.expand.default(x, [2, 3, -1]), f(3, 1)))
add("aten.permute.default", case(lambda x: A.permute.default(x, [2, 0, 1]), f(2, 3, 4)))
add("aten.transpose.int", case(lambda x: A.transpose.int(x, 0, -1), f(2, 3, 4)))
add("aten.t.default", case(lambda x: A.t.default(x), f(3, 4)))
add("aten.unsqueeze.default", case(lambda x: A.unsqueeze.default(x, -1), f(3, 4)))
add(
    "aten.squeeze.dim",
    case(lambda x: A.squeeze.dim(x, 1), f(3, 1, 4)),
    case(lambda x: A.squeeze.dim(x, 0), f(3, 1, 4)),
)
add("aten.squeeze.dims", case(lambda x: A.squeeze.dims(x, [0, 2]), f(1, 3, 1)))
add("aten.squeeze.default", case(lambda x: A.squeeze.default(x), f(1, 3, 1)))
add(
    "aten.slice.Tensor",
    case(lambda x: A.slice.Tensor(x, 1, 1, 9223372036854775807, 2), f(3, 7)),
    case(lambda x: A.slice.Tensor(x, 0, -2), f(5, 2)),
    case(lambda x: A.slice.Tensor(x, 0, 1, x.shape[0]), f(5, 2), dynamic=True),
)
add(
    "aten.select.int",
    case(lambda x: A.select.int(x, 1, -1), f(3, 4)),
    case(lambda x: A.select.int(x, 0, 1), f(4, 2), dynamic=True),
    case(lambda x: A.select.int(x, 0, x.shape[0] - 1), f(4, 2), dynamic=True),
)
add("aten.split_with_sizes.default", case(lambda x: A.split_with_sizes.default(x, [1, 3], 1), f(2, 4)))
add("aten.split.Tensor", case(lambda x: A.split.Tensor(x, 2, 0), f(5, 3)))
add("aten.unbind.int", case(lambda x: A.unbind.int(x, 1), f(2, 3)))
add("aten.cat.default", case(lambda x, y: A.cat.default([x, y], -1), f(3, 2), f(3, 4)))
add("aten.flip.default", case(lambda x: A.flip.default(x, [0, 1]), f(3, 4)))
add("aten.repeat.default", case(lambda x: A.repeat.default(x, [2, 1, 3]), f(3, 2)))
add("aten.constant_pad_nd.default", case(lambda x: A.constant_pad_nd.default(x, [1, 2, -1, 0], 0.5), f(3, 4)))
add("aten.reflection_pad1d.default", case(lambda x: A.reflection_pad1d.default(x, [2, 1]), f(2, 3, 5)))
add(
    "aten.reflection_pad2d.default",
    case(lambda x: A.reflection_pad2d.default(x, [1, 1, 2, 0]), f(1, 2, 4, 5)),
)
add(
    "aten.reflection_pad3d.default",
    case(lambda x: A.reflection_pad3d.default(x, [1, 0, 0, 2, 1, 1]), f(1, 2, 3, 4, 4)),
)
add(
    "aten.replication_pad3d.default",
    case(lambda x: A.replication_pad3d.default(x, [1, 0, 0, 2, 1, 1]), f(1, 2, 3, 4, 4)),
)
add("aten.diagonal.default", case(lambda x: A.diagonal.default(x, 1, 0, 2), f(4, 2, 5)))
add("aten.slice_scatter.default", case(lambda x, y: A.slice_scatter.default(x, y, 1, 1, 3), f(3, 5), f(3, 2)),
    case(lambda x, y: A.slice_scatter.default(x, y, 0, 2, 5), f(6, 2), f(3, 2), dynamic=(0,)))
add("aten.select_scatter.default", case(lambda x, y: A.select_scatter.default(x, y, 1, -1), f(3, 4), f(3)))
add(
    "aten.replication_pad2d.default",
    case(lambda x: A.replication_pad2d.default(x, [2, 0, 1, 1]), f(1, 2, 4, 5)),
)
