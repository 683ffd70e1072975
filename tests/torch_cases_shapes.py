"""Torch-comparison cases (tests/torch_registry.py) of the shape methods, indexing, dtype conversions and
the questions PyTorch asks of a tensor (size, numel, dim, dtype)."""
import numpy as np

import refcomp as rc
from api_helpers import torch
from torch_registry import a, case, refusal

X = a(3, 4, 5, edges=True)


def same(key, call, *inputs, **kw):
    """A method called identically on both sides (PyTorch's spelling is refcomp's)."""
    case(f"Tensor.{key}", call, call, *(inputs or (X,)), exact=True, **kw)


same("view", lambda x: x.view(12, 5))
same("view", lambda x: x.view(-1, 10))
same("reshape", lambda x: x.reshape(5, -1), emulate=True)
same("reshape", lambda x: x.reshape((2, 30)))
same("flatten", lambda x: x.flatten())
same("flatten", lambda x: x.flatten(1))
same("flatten", lambda x: x.flatten(0, 1))
same("unflatten", lambda x: x.unflatten(1, (2, -1)))
same("permute", lambda x: x.permute(2, 0, 1), emulate=True)
same("permute", lambda x: x.permute((1, 2, 0)))
same("transpose", lambda x: x.transpose(0, 2))
same("swapaxes", lambda x: x.swapaxes(0, 1))
same("swapdims", lambda x: x.swapdims(1, 2))
same("t", lambda x: x.t(), a(3, 4))
same("t", lambda x: x.t(), a(4))
refusal("Tensor.t", lambda x: x.t(), "at most 2 axes", inputs=(X,))
same("T", lambda x: x.T, a(3, 4))
same("mT", lambda x: x.mT)
same("unsqueeze", lambda x: x.unsqueeze(1))
same("unsqueeze", lambda x: x.unsqueeze(-1))
for args in ((), (0,), (1,), ((0, 2),), (-1,)):
    same("squeeze", lambda x, args=args: x.squeeze(*args), a(1, 3, 1))
refusal("Tensor.squeeze", lambda: rc.input("y", ("B", 3)).squeeze(), "symbolic length B")
same("flip", lambda x: x.flip(0))
same("flip", lambda x: x.flip((0, 2)))
same("expand", lambda x: x.expand(2, -1, 4), a(1, 4))
same("broadcast_to", lambda x: x.broadcast_to((2, 3, 4)), a(3, 1))
for key in ("split", "chunk"):
    refusal(
        f"Tensor.{key}",
        lambda k=key: getattr(rc.input("y", ("B", 3)), k)(2),
        "symbolic length" if key == "split" else "known",
    )
same("split", lambda x: x.split(2))
same("split", lambda x: x.split([1, 3], dim=1))
same("split", lambda x: x.split(2, 1), emulate=True)
same("split", lambda x: x.split(4, -1))
same("chunk", lambda x: x.chunk(3))
same("chunk", lambda x: x.chunk(2, dim=1))
same("chunk", lambda x: x.chunk(4, 1), a(2, 6))  # ceil(6 / 4) = 2: three pieces, as PyTorch
same("diagonal", lambda x: x.diagonal())
same("diagonal", lambda x: x.diagonal(1, 1, 2))
same("diagonal", lambda x: x.diagonal(offset=-1, dim1=2, dim2=0))
same("roll", lambda x: x.roll(7))
same("roll", lambda x: x.roll((1, -3), (0, 2)))
same("repeat", lambda x: x.repeat(2, 1, 1, 3))
same("repeat_interleave", lambda x: x.repeat_interleave(3, dim=1))
same("repeat_interleave", lambda x: x.repeat_interleave(2))
same("unfold", lambda x: x.unfold(2, 3, 2))
same("as_strided", lambda x: x.as_strided((4, 3), (5, 2), 1))
same("tril", lambda x: x.tril())
same("tril", lambda x: x.tril(-1), emulate=True)
same("triu", lambda x: x.triu(1))
same("triu", lambda x: x.triu(diagonal=-2))
case("Tensor.matmul", lambda x, y: x.matmul(y), lambda x, y: x.matmul(y), a(2, 3, 4), a(4, 2), rtol=1e-6)
case("Tensor.matmul", lambda x, y: x.matmul(y), lambda x, y: x.matmul(y), a(4), a(3, 4, 2), rtol=1e-6)

IDS = a(2, 3, ids=True, high=3)
case("Tensor.gather", lambda x, i: x.gather(1, i), lambda t, i: t.gather(1, i), a(2, 5), IDS, exact=True)
case(
    "Tensor.gather",
    lambda x: x.gather(1, x.argmax(1, keepdim=True)),
    lambda t: t.gather(1, t.argmax(1, keepdim=True)),
    X,
    exact=True,
)
case(
    "Tensor.index_select",
    lambda x, i: x.index_select(1, i),
    lambda t, i: t.index_select(1, i),
    X,
    a(3, ids=True),
    exact=True,
)
for dim, n, source in (
    (0, 3, a(2, 4, 5, edges=True)),
    (1, 4, a(3, 3, 5, edges=True)),
    (-1, 5, a(3, 4, 2, edges=True)),
):
    case(
        "Tensor.index_copy",
        lambda x, i, s, d=dim: x.index_copy(d, i, s),
        lambda t, i, s, d=dim: t.index_copy(d, i, s),
        X,
        a(source.shape[dim], ids=True, distinct=True, high=n),
        source,
        exact=True,
        emulate=dim == 1,
    )
case("Tensor.index_copy", lambda x, s: x.index_copy(1, rc.arange(2) * 2 + 1, s),
     lambda t, s: t.index_copy(1, torch.arange(2) * 2 + 1, s), X, a(3, 2, 5), exact=True)
case("Tensor.index_copy", lambda x, i, s: x.index_copy(0, i, s), lambda t, i, s: t.index_copy(0, i, s), a(5),
     a(1, ids=True, distinct=True, high=5), a(1), exact=True)
case("Tensor.index_copy", lambda x, i, s: x.index_copy(0, i, s), lambda t, i, s: t.index_copy(0, i, s), a(4),
     a(ids=True, distinct=True, high=4), a(), exact=True)  # a 0-d index and source
refusal(
    "Tensor.index_copy",
    lambda x, i, s: x.index_copy(0, i, s),
    "must have shape",
    inputs=(X, a(2, ids=True), a(2, 4, 4)),
)
refusal(
    "Tensor.index_copy",
    lambda x, i: rc.evaluate(
        x.index_copy(0, i, x[:2]), {"a1": np.array([1, 1], np.int32), "a0": np.zeros((3, 4, 5), np.float32)}
    ),
    "distinct",
    inputs=(X, a(2, ids=True)),
)
case(
    "Tensor.x[1, 2:5, None, ...]",
    lambda x: x[1, 2:5, None, ...],
    lambda t: t[1, 2:5, None, ...],
    a(3, 6, 4),
    exact=True,
)
for index in ((slice(None), slice(None, None, 2)), (Ellipsis, -1), (slice(1, None), None, 0)):
    case("Tensor.x[1, 2:5, None, ...]", lambda x, i=index: x[i], lambda t, i=index: t[i], X, exact=True)
case("Tensor.x[ids]", lambda x, i: x[i], lambda t, i: t[i], X, a(2, 2, ids=True, high=3), exact=True)
ANY_AXIS = (((slice(None), "ids"), a(3, ids=True, high=4)), ((Ellipsis, "ids"), a(2, 2, ids=True, high=5)),
            ((1, "ids"), a(1, 2, ids=True, high=4)), (("ids", slice(1, None)), a(2, ids=True, high=3)))
for where, ids in ANY_AXIS:
    case("Tensor.x[ids]", lambda x, i, w=where: x[tuple(i if p == "ids" else p for p in w)],
         lambda t, i, w=where: t[tuple(i if p == "ids" else p for p in w)], X, ids, exact=True,
         emulate=where[0] is Ellipsis)  # ids along any axis, of any shape: PyTorch's placement

for index in ((slice(None), [3, 0]), (1, [3, 2, 0]), (Ellipsis, [1, 3]), [0, 2, 2], (slice(None), [2, 0, 2])):
    case("Tensor.x[..., [2, 0, 2], ...]", lambda x, i=index: x[i], lambda t, i=index: t[i], X, exact=True)
refusal(
    "Tensor.x[..., [2, 0, 2], ...]", lambda x: x[[0, 1], [0, 1]], "one list or tensor of ints at a time",
    inputs=(X,)
)
refusal("Tensor.x[..., [2, 0, 2], ...]", lambda x: x[x > 0], "boolean mask", inputs=(X,))

same("to", lambda x: x.to(torch.float16))
same("to", lambda x: x.to(torch.bfloat16))
same("to", lambda x: x.to(dtype=torch.bool))
same("to", lambda x: x.half().to(torch.float32))
same("to", lambda x: (x * 1000).to(torch.int64))  # truncates toward zero
same("long", lambda x: (x * 1e12).long() * 3)  # past 2^24 and wrapping nothing: int64 exactly
same("int", lambda x: (x * 3e9).int())  # past int32's range: x86's int32 lowest, as PyTorch's CPU
same("double", lambda x: x.double() * 0.1)
same("to", lambda x: x.to(torch.float64) + 1e-12)
same("to", lambda x: (x * 3e9).to(torch.int64).to(torch.int32))  # wraps to 32 bits
refusal("Tensor.to", lambda x: x.to(torch.uint8), "uint8", inputs=(X,))
same("type", lambda x: x.type(torch.float16))
case(
    "Tensor.type_as", lambda x, y: x.type_as(y.half()), lambda x, y: x.type_as(y.half()), X, a(2), exact=True
)
case("Tensor.type_as", lambda x, y: x.type_as(y > 0), lambda x, y: x.type_as(y > 0), X, a(2), exact=True)
same("half", lambda x: x.half(), emulate=True)
same("bfloat16", lambda x: x.bfloat16())
same("float", lambda x: x.half().float())
same("bool", lambda x: x.bool())
same("clone", lambda x: x.clone())
same("detach", lambda x: x.detach())
same("contiguous", lambda x: x.transpose(0, 1).contiguous())
same("new_zeros", lambda x: x.new_zeros(2, 3))
same("new_zeros", lambda x: x.half().new_zeros((2,)))
same("new_ones", lambda x: x.new_ones((3, 1)))
same("new_ones", lambda x: (x > 0).new_ones(2))
same("new_full", lambda x: x.new_full((2, 2), 3.5))
same("new_full", lambda x: x.bfloat16().new_full((2,), 0.1))

case("Tensor.size", lambda x: x.size(), lambda t: tuple(t.size()), X)
case("Tensor.size", lambda x: (x.size(1), x.size(dim=-1)), lambda t: (t.size(1), t.size(dim=-1)), X)
case("Tensor.numel", lambda x: x.numel(), lambda t: t.numel(), X)
case("Tensor.dim", lambda x: x.dim(), lambda t: t.dim(), X)
case("Tensor.shape", lambda x: x.shape, lambda t: tuple(t.shape), X)
case("Tensor.ndim", lambda x: x.ndim, lambda t: t.ndim, X)
case(
    "Tensor.dtype",
    lambda x: (x.dtype, x.half().dtype, x.bfloat16().dtype),
    lambda t: tuple(
        str(d).replace("torch.", "") for d in (t.float().dtype, t.half().dtype, t.bfloat16().dtype)
    ),
    X,
)
