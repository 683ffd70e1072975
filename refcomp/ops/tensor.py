"""The Tensor users hold: the core (`core.TensorCore`) joined with the method mixins.

Arithmetic creates primitive nodes; movement creates new views of the same node. Each mixin builds
its methods only from the primitives in `primitives.OPS` and the core's builders.
"""
from __future__ import annotations

from ..errors import UnsupportedError
from .core import DTYPES, TensorCore, broadcast, broadcast_shape, constant, format_shape, input, iota, lift
from .elementwise import ElementwiseMixin
from .linalg import LinalgMixin
from .torch_aliases import TorchAliasesMixin
from .torch_methods import TorchMethodsMixin
from .torch_shapes import TorchShapesMixin
from .trigonometry import TrigonometryMixin
from .movement import MovementMixin
from .provenance import user_op
from .random_tensors import RandomMixin
from .reductions import ReductionMixin
from .sorting import SortingMixin
from .special import SpecialMixin

__all__ = [
    "Tensor",
    "BoolTensor",
    "DTYPES",
    "broadcast",
    "broadcast_shape",
    "constant",
    "format_shape",
    "input",
    "iota",
    "lift",
]


class Tensor(MovementMixin, ElementwiseMixin, SpecialMixin, ReductionMixin, LinalgMixin, TorchMethodsMixin,
             TorchShapesMixin, TrigonometryMixin, SortingMixin, RandomMixin, TorchAliasesMixin, TensorCore):
    __slots__ = ("edge",)
    __array_priority__ = 1000  # so `ndarray + Tensor` defers to Tensor.__radd__

    def __getattr__(self, name: str):
        """Reached only for a name the class lacks: a public one is an UnsupportedError that says what
        to do instead (Python's protocols and private names stay plain AttributeErrors)."""
        if name.startswith("_") or name == "edge":
            raise AttributeError(name)
        raise UnsupportedError(f"{self.label}: refcomp's Tensor has no {name!r}{_instead(name)}")


def _instead(name: str) -> str:
    """What a PyTorch user reaching for `name` can do in refcomp."""
    if name in ("item", "tolist", "numpy", "cpu", "cuda", "detach", "data", "storage", "data_ptr"):
        return ("; a refcomp Tensor is a value in a graph, not data: rc.evaluate(t, feeds) or "
                "rc.compile(t).run(feeds) returns its array")
    if name in ("backward", "grad", "requires_grad", "requires_grad_", "retain_grad"):
        return "; refcomp compiles inference graphs and has no autograd"
    if name.endswith("_"):
        return f"; refcomp's tensors are immutable: use the out-of-place {name[:-1]!r} where it exists"
    return " (docs/api.md lists the PyTorch methods refcomp has)"


class BoolTensor(Tensor):
    """0.0/1.0 values that PyTorch would type torch.bool: what comparisons, the logical operations,
    isnan/isinf/isfinite, any/all and `.bool()` return, and views of them.

    Values and dtype are those of a float tensor (refcomp computes in float32); the flag only tells a
    call whose meaning depends on bool-ness which one the user wrote: `attn_mask` selects with a
    boolean mask and adds a float one, as PyTorch does. Arithmetic gives a plain Tensor."""
    __slots__ = ()

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + " (bool)>"


TensorCore.full = Tensor
TensorCore._boolean = BoolTensor

# Operators are user ops under the names people say: `a + b` builds "add" nodes.
OPERATORS = {
    "__add__": "add",
    "__radd__": "add",
    "__sub__": "sub",
    "__rsub__": "sub",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__truediv__": "div",
    "__rtruediv__": "div",
    "__neg__": "neg",
    "__pow__": "pow",
    "__rpow__": "pow",
    "__mod__": "mod",
    "__rmod__": "mod",
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__eq__": "eq",
    "__ne__": "ne",
    "__getitem__": "index",
    "__floordiv__": "floor_divide",
    "__rfloordiv__": "floor_divide",
    "__and__": "logical_and",
    "__rand__": "logical_and",
    "__or__": "logical_or",
    "__ror__": "logical_or",
    "__xor__": "logical_xor",
    "__rxor__": "logical_xor",
    "__invert__": "logical_not",
    "__abs__": "abs",
}


def _record_provenance(cls: type) -> None:
    """Wrap every public method and operator of the mixins in provenance.user_op, once, here."""
    for mixin in (
        MovementMixin,
        ElementwiseMixin,
        SpecialMixin,
        ReductionMixin,
        LinalgMixin,
        TorchMethodsMixin,
        TorchShapesMixin,
        TrigonometryMixin,
        SortingMixin,
        RandomMixin,
        TorchAliasesMixin,
    ):
        for attr, value in vars(mixin).items():
            name = OPERATORS.get(attr, None if attr.startswith("_") else attr)
            if name is not None and callable(value) and not hasattr(value, "user_op"):
                setattr(cls, attr, user_op(value, name=name))


_record_provenance(Tensor)
