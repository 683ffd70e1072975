"""THE table of ATen ops refcomp imports: one row per op overload.

The importer looks each node up here (an op with no row is refused, all of them in one error),
docs/torch.md prints it (`markdown`, checked by tests/test_torch_export_ops.py) and the tests
drive a comparison with PyTorch from it: a row without one fails the suite.

A row: the op's name as torch prints it, its converter (aten_math, aten_shape, aten_nn,
aten_reduce: `fn(call, *args, **kwargs)` in ATen's argument order), notes for the docs, and how
integer values pass through it (aten_call.Call): `raw` lists the arguments taken as they are
(indices), `ints` bounds an integer result computed at run time (no rule: refused), `affine`
keeps an integer result affine in its indices, and `view` marks ops that move a fed integer
input's ids along with its values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from . import aten_math as m
from . import aten_nn as n
from . import aten_reduce as r
from . import aten_shape as s
from .aten_values import broadcast_dims
from .onnx_positions import Positions


@dataclass(frozen=True)
class Row:
    name: str
    fn: Callable
    notes: str = ""
    raw: tuple = ()
    ints: Optional[Callable] = None
    affine: Optional[Callable] = None
    view: bool = False


def op_name(target) -> str:
    """`aten.add.Tensor` for an ATen overload; `operator.add` for a Python builtin on sizes."""
    if hasattr(target, "_schema"):
        return str(target)
    module = getattr(target, "__module__", None) or "builtins"
    return (f"{'operator' if module in ('_operator', 'builtins') else module}."
            f"{getattr(target, '__name__', target)}")


# Ops that compute nothing refcomp needs: checks of metadata and of sizes torch already guarantees.
IGNORED = frozenset(
    {
        "aten._assert_tensor_metadata.default",
        "aten._assert_scalar.default",
        "aten._assert_async.msg",
        "aten.sym_constrain_range.default",
        "aten.sym_constrain_range_for_size.default",
    }
)


# --- affine rules for arithmetic on positions ----------------------------------------------------------
def _plus(sign: int):
    def rule(call, a, b, alpha=1):
        pa, pb = _affine(a), _affine(b)
        if pa is None or pb is None or not isinstance(alpha, int):
            return None
        shape = broadcast_dims([pa.shape, pb.shape])
        return pa.plus(pb.scaled(alpha) if alpha != 1 else pb, shape, sign)
    return rule


def _times(call, a, b):
    pa, pb = _affine(a), _affine(b)
    if pa is None or pb is None:
        return None
    if not pb.shape and all(st == 0 for st in pb.steps):
        return pa.scaled(pb.offset)
    if not pa.shape and all(st == 0 for st in pa.steps):
        return pb.scaled(pa.offset)
    if all(st == 0 for st in pb.steps):
        return pa.expanded(broadcast_dims([pa.shape, pb.shape])).scaled(pb.offset)
    if all(st == 0 for st in pa.steps):
        return pb.expanded(broadcast_dims([pa.shape, pb.shape])).scaled(pa.offset)
    return None


def _affine(v) -> Optional[Positions]:
    """An argument as Positions: an integer value's, or a Python int / dim as a 0-d constant."""
    if hasattr(v, "affine"):
        return v.affine()
    if isinstance(v, bool) or not (isinstance(v, int) or hasattr(v, "free_symbols")):
        return None
    return Positions((), (), v)


def _neg(call, x):
    return x.affine().scaled(-1)


def _same(call, x, *args, **kwargs):
    return x.affine()




_VIEW = dict(view=True, ints=m.first_bound)
_MOVE = "a view of the same node (no copy)"

ROWS = [
    # arithmetic
    Row("aten.add.Tensor", m.add, "alpha too", ints=m.sum_bound, affine=_plus(1)),
    Row("aten.add.Scalar", m.add, "", ints=m.sum_bound, affine=_plus(1)),
    Row("aten.sub.Tensor", m.sub, "alpha too", ints=m.sum_bound, affine=_plus(-1)),
    Row("aten.sub.Scalar", m.sub, "", ints=m.sum_bound, affine=_plus(-1)),
    Row("aten.rsub.Scalar", m.rsub, "other - alpha * self", ints=m.rsub_bound),
    Row("aten.mul.Tensor", m.mul, "", ints=m.product_bound, affine=_times),
    Row("aten.mul.Scalar", m.mul, "", ints=m.product_bound, affine=_times),
    Row("aten.div.Tensor", m.div, "true division"),
    Row("aten.div.Scalar", m.div, "true division"),
    Row("aten.div.Tensor_mode", m.div, "rounding_mode trunc or floor (floats; integers exactly)"),
    Row("aten.div.Scalar_mode", m.div, "rounding_mode trunc or floor (floats; integers exactly)"),
    Row("aten.pow.Tensor_Scalar", m.pow_, "NumPy's powf at the edges"),
    Row("aten.pow.Tensor_Tensor", m.pow_, ""),
    Row("aten.pow.Scalar", m.pow_scalar, "a number to a tensor's powers"),
    Row("aten.neg.default", m.method("neg"), "", ints=m.neg_bound, affine=_neg),
    Row("aten.abs.default", m.method("abs"), "", ints=m.neg_bound),
    Row("aten.reciprocal.default", m.method("reciprocal")),
    Row("aten.fmod.Tensor", m.fmod_, "the dividend's sign"),
    Row("aten.fmod.Scalar", m.fmod_, "the dividend's sign"),
    Row("aten.remainder.Tensor", m.remainder, "the divisor's sign (Python's %)"),
    Row("aten.remainder.Scalar", m.remainder, "the divisor's sign (Python's %)"),
    Row("aten.maximum.default", m.maximum_, "NaN propagates", ints=m.same_bound),
    Row("aten.minimum.default", m.minimum_, "NaN propagates", ints=m.same_bound),
    Row("aten.clamp.default", m.clamp, "numbers; min > max gives max", ints=m.first_bound),
    Row("aten.clamp.Tensor", m.clamp, "tensor bounds"),
    Row("aten.atan2.default", m.atan2, ""),
    # functions
    *[
        Row(f"aten.{name}.default", m.method(name), "")
        for name in (
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
        )
    ],
    Row("aten.relu.default", m.method("relu"), "", ints=m.first_bound),
    Row("aten.gelu.default", m.gelu, "approximate none (erf) or tanh"),
    Row("aten.hardtanh.default", m.hardtanh, ""),
    Row("aten.leaky_relu.default", m.leaky_relu, ""),
    Row("aten.elu.default", m.elu, "alpha, scale and input_scale (SELU, CELU)"),
    Row("aten.round.default", m.round_, "half to even"),
    Row("aten.round.decimals", m.round_, "half to even, through 10^-d's reciprocal"),
    Row("aten.isnan.default", m.method("isnan"), "a boolean"),
    Row("aten.isinf.default", m.method("isinf"), "a boolean"),
    # selection, comparison, logic
    Row(
        "aten.where.self", m.where_, "a true select (the branch not taken never leaks NaN)", ints=m.same_bound
    ),
    Row("aten.masked_fill.Scalar", m.masked_fill, "", ints=m.same_bound),
    Row("aten.masked_fill.Tensor", m.masked_fill, "a 0-d value", ints=m.same_bound),
    *[
        Row(f"aten.{name}.{kind}", m.compare(name), "a boolean")
        for name in ("eq", "ne", "lt", "le", "gt", "ge")
        for kind in ("Tensor", "Scalar")
    ],
    *[
        Row(f"aten.logical_{name}.default", m.logical(f"logical_{name}"), "any nonzero is true")
        for name in ("and", "or", "xor", "not")
    ],
    *[
        Row(
            f"aten.bitwise_{name}.{kind}",
            m.logical(f"logical_{name}"),
            "booleans only (integers fold if static)",
        )
        for name in ("and", "or", "xor")
        for kind in ("Tensor", "Scalar")
    ],
    Row("aten.bitwise_not.default", m.logical("logical_not"), "booleans only (integers fold if static)"),
    # casts, copies, creation
    Row(
        "aten._to_copy.default",
        m.to_copy,
        "dtype casts: float32/16/bf16, bool, integers (a float to an integer truncates)",
        ints=m.to_copy_bound,
        affine=_same,
        view=True,
    ),
    Row("aten.clone.default", m.identity, "", affine=_same, **_VIEW),
    Row("aten.alias.default", m.identity, "", affine=_same, **_VIEW),
    Row("aten.detach.default", m.identity, "", affine=_same, **_VIEW),
    Row("aten.lift_fresh_copy.default", m.identity, "", affine=_same, **_VIEW),
    Row("aten.copy.default", m.copy, "the source broadcast to the destination", ints=m.same_bound),
    Row("aten.scalar_tensor.default", m.scalar_tensor, "", ints=m.value_bound),
    Row("aten.full.default", m.full_, "sizes may be symbolic", ints=m.value_bound, affine=m.full_affine),
    Row("aten.full_like.default", m.full_like, "", ints=m.value_bound, affine=m.full_like_affine),
    Row("aten.fill.Scalar", m.fill, "", ints=m.value_bound),
    Row(
        "aten.arange.start_step",
        m.arange_,
        "ends may be symbolic dims (integer positions)",
        ints=m.arange_bound,
        affine=m.arange_affine,
    ),
    # views and movement
    Row("aten.view.default", s.view, _MOVE, affine=s.view_affine, **_VIEW),
    Row("aten._unsafe_view.default", s.view, _MOVE, affine=s.view_affine, **_VIEW),
    Row("aten.reshape.default", s.view, _MOVE, affine=s.view_affine, **_VIEW),
    Row("aten.expand.default", s.expand, _MOVE, affine=s.expand_affine, **_VIEW),
    Row("aten.permute.default", s.permute, _MOVE, affine=s.permute_affine, **_VIEW),
    Row("aten.transpose.int", s.transpose, _MOVE, affine=s.transpose_affine, **_VIEW),
    Row("aten.t.default", s.t_, _MOVE, **_VIEW),
    Row("aten.unsqueeze.default", s.unsqueeze, _MOVE, affine=s.unsqueeze_affine, **_VIEW),
    Row("aten.squeeze.dim", s.squeeze, "axes of size 1 only", affine=s.squeeze_affine, **_VIEW),
    Row("aten.squeeze.dims", s.squeeze, "axes of size 1 only", affine=s.squeeze_affine, **_VIEW),
    Row("aten.squeeze.default", s.squeeze, "axes of size 1 only", affine=s.squeeze_affine, **_VIEW),
    Row("aten.slice.Tensor", s.slice_, "ends clamped, symbolic ends too", affine=s.slice_affine, **_VIEW),
    Row("aten.select.int", s.select, "negative indices count from the end", affine=s.select_affine, **_VIEW),
    Row("aten.split_with_sizes.default", s.split_with_sizes, "views", **_VIEW),
    Row("aten.split.Tensor", s.split, "views; a known length", **_VIEW),
    Row("aten.unbind.int", s.unbind, "views; a known length", **_VIEW),
    Row("aten.cat.default", s.cat, "", ints=m.same_bound),
    Row("aten.flip.default", s.flip, _MOVE, **_VIEW),
    Row("aten.repeat.default", s.repeat, "", ints=m.first_bound),
    Row("aten.constant_pad_nd.default", s.constant_pad_nd, "negative pads crop", ints=m.same_bound),
    Row("aten.reflection_pad1d.default", s.pad_mode("reflect")),
    Row("aten.reflection_pad2d.default", s.pad_mode("reflect")),
    Row("aten.reflection_pad3d.default", s.pad_mode("reflect")),
    Row("aten.replication_pad2d.default", s.pad_mode("replicate")),
    Row("aten.replication_pad3d.default", s.pad_mode("replicate")),
    Row("aten.diagonal.default", s.diagonal, "known lengths"),
    Row(
        "aten.slice_scatter.default",
        s.slice_scatter,
        "a functionalized slice write; step 1",
        ints=m.same_bound,
    ),
    Row("aten.select_scatter.default", s.select_scatter, "a functionalized index write", ints=m.same_bound),
    # indexing
    Row(
        "aten.index.Tensor",
        s.index,
        "positions: a strided view; one fed or static index tensor: index_select",
        raw=(1,),
        ints=m.first_bound,
        affine=s.index_affine,
    ),
    Row("aten.index_select.default", s.index_select, "", raw=(2,), ints=m.first_bound),
    Row(
        "aten.index_put.default",
        s.index_put,
        "one 1-D index tensor of fed or static ids: index_copy (distinct ids, "
        "checked at run time); accumulate=True is refused",
        raw=(1,),
    ),
    Row(
        "aten.gather.default",
        s.gather,
        "positions: a strided view; else integer ids",
        raw=(2,),
        ints=m.first_bound,
        affine=s.gather_affine,
    ),
    Row("aten.embedding.default", s.embedding, "integer ids (fed, computed or static); positions a view",
        raw=(1,)),
    Row("aten.sym_size.int", s.sym_size, "a dim", raw=(0,)),
    Row("aten._embedding_bag.default", n.embedding_bag, "sum, mean, max; the first of its four results"),
    # contractions, convolutions, pools
    Row("aten.addmm.default", n.addmm, "beta and alpha too"),
    Row("aten.mm.default", n.mm, ""),
    Row("aten.bmm.default", n.bmm, ""),
    Row("aten.linear.default", n.linear, "in programs not decomposed (import_program)"),
    Row(
        "aten.scaled_dot_product_attention.default",
        n.attention,
        "in programs not decomposed; a boolean mask selects, a float one adds; grouped-query heads",
    ),
    Row("aten.convolution.default", n.convolution, "1-3 spatial axes, groups, dilation; transposed too"),
    Row(
        "aten.max_pool2d_with_indices.default",
        n.max_pool_with_indices,
        "indices in the flattened plane",
        ints=n.max_pool_bound,
    ),
    Row(
        "aten.max_pool3d_with_indices.default",
        n.max_pool_with_indices,
        "indices in the flattened volume",
        ints=n.max_pool_bound,
    ),
    Row(
        "aten.adaptive_max_pool2d.default",
        n.adaptive_max_pool,
        "(values, indices); sizes the output divides",
        ints=n.max_pool_bound,
    ),
    Row("aten.avg_pool1d.default", n.avg_pool_, "ceil_mode, count_include_pad"),
    Row("aten.avg_pool2d.default", n.avg_pool_, "ceil_mode, count_include_pad, divisor_override"),
    Row("aten.avg_pool3d.default", n.avg_pool_, "ceil_mode, count_include_pad, divisor_override"),
    Row("aten.adaptive_avg_pool1d.default", n.adaptive_avg_pool, "a known length"),
    Row("aten._adaptive_avg_pool2d.default", n.adaptive_avg_pool, "known spatial sizes"),
    Row("aten._adaptive_avg_pool3d.default", n.adaptive_avg_pool, "known spatial sizes"),
    Row("aten.upsample_nearest2d.vec", n.upsample("nearest"), "output_size or scale_factors"),
    Row("aten.upsample_bilinear2d.vec", n.upsample("bilinear"), "align_corners too"),
    # normalisation
    Row("aten._softmax.default", n.softmax, "half_to_float too"),
    Row("aten._log_softmax.default", n.log_softmax, "half_to_float too"),
    Row("aten.native_layer_norm.default", n.native_layer_norm, "(out, mean, rstd)"),
    Row("aten.native_group_norm.default", n.native_group_norm, "(out, mean, rstd)"),
    Row("aten._native_batch_norm_legit_no_training.default", n.batch_norm_inference, "running statistics"),
    Row("aten.native_batch_norm.default", n.native_batch_norm, "training=False only"),
    Row(
        "aten._native_batch_norm_legit.default",
        n.batch_norm_legit,
        "training: the batch's statistics (no update)",
    ),
    Row(
        "aten._native_batch_norm_legit.no_stats",
        n.batch_norm_batch_statistics,
        "the batch's statistics (InstanceNorm)",
    ),
    Row("aten.native_dropout.default", n.native_dropout, "outside training only"),
    # reductions and scans
    Row("aten.sum.dim_IntList", r.sum_, "an empty dim list: every axis", ints=r.sum_bound),
    Row("aten.sum.default", r.sum_, "", ints=r.sum_bound),
    Row("aten.mean.dim", r.mean, "an empty dim list: every axis"),
    Row("aten.mean.default", r.mean, ""),
    Row("aten.var.correction", r.var, "correction None is 1"),
    Row("aten.var.dim", r.var_unbiased, "unbiased"),
    Row("aten.var_mean.correction", r.var_mean, "(var, mean); correction None is 1"),
    Row("aten.amax.default", r.amax, "NaN propagates", ints=m.first_bound),
    Row("aten.amin.default", r.amin, "NaN propagates", ints=m.first_bound),
    Row("aten.max.dim", r.extreme_dim("max"), "(values, indices of the first maximum)", ints=r.pair_bound),
    Row("aten.min.dim", r.extreme_dim("min"), "(values, indices of the first minimum)", ints=r.pair_bound),
    Row("aten.max.default", r.extreme_all("max"), "", ints=m.first_bound),
    Row("aten.min.default", r.extreme_all("min"), "", ints=m.first_bound),
    Row("aten.argmax.default", r.arg_extreme("argmax"), "NaN counts as the maximum", ints=r.index_bound),
    Row("aten.argmin.default", r.arg_extreme("argmin"), "NaN counts as the minimum", ints=r.index_bound),
    Row("aten.linalg_vector_norm.default", r.vector_norm, "any ord (inf, -inf, 0 too)"),
    Row("aten.prod.dim_int", r.prod_, "a known length"),
    Row("aten.prod.default", r.prod_, "known lengths"),
    Row("aten.any.dim", r.any_, "a boolean"),
    Row("aten.any.dims", r.any_, "a boolean; an empty list reduces nothing"),
    Row("aten.any.default", r.any_, "a boolean"),
    Row("aten.all.dim", r.all_, "a boolean"),
    Row("aten.all.default", r.all_, "a boolean"),
    Row("aten.cumsum.default", r.cumsum, "", ints=r.cumsum_bound),
    Row("aten.topk.default", r.topk, "(values, indices); ties by position", ints=r.topk_bound),
    Row("aten.sort.default", r.sort, "(values, indices); stable", ints=r.pair_bound),
]

TABLE: dict[str, Row] = {row.name: row for row in ROWS}
assert len(TABLE) == len(ROWS), "a row is repeated"

# Core ATen ops (torch.Tag.core in torch 2.13) with no row, and why: an exported program using one is
# refused by the importer's one error. docs/torch.md lists them; a test keeps this list complete.
_TRAINING = "training only (gradients, batch statistics)"
NOT_MAPPED = {
    **{
        f"aten.{name}": _TRAINING
        for name in (
            "_adaptive_avg_pool2d_backward.default",
            "avg_pool2d_backward.default",
            "convolution_backward.default",
            "embedding_dense_backward.default",
            "max_pool2d_with_indices_backward.default",
            "native_group_norm_backward.default",
            "native_layer_norm_backward.default",
        )
    },
    **{
        f"aten.{name}": "random values (refcomp has no random tensors yet)"
        for name in ("rand.default", "randn.default", "randperm.default")
    },
    **{
        f"aten.{name}": "writes at indices computed at run time, adding where they repeat "
        "(refcomp's Scatter writes distinct rows)"
        for name in (
            "scatter.src",
            "scatter.value",
            "scatter_add.default",
            "scatter_reduce.two",
            "masked_scatter.default",
        )
    },
    "aten.nonzero.default": "a result whose shape depends on the data",
    "aten._local_scalar_dense.default": "a tensor's value read back into Python (.item())",
    "aten.empty.memory_format": "uninitialised memory",
    "aten.empty_strided.default": "uninitialised memory",
    "aten.as_strided.default": "strides of torch's storage, which a refcomp graph does not have",
    "aten.sym_stride.int": "strides of torch's storage",
    "aten.sym_storage_offset.default": "torch's storage",
    "aten.sym_is_contiguous.default": "torch's storage",
    "aten.resize_.default": "an in-place resize of torch's storage",
    "aten.sym_numel.default": "torch.export writes sizes' products as Python arithmetic on sym_size",
    "aten.atan2.out": "an out= variant (not in functional programs)",
    "aten._cdist_forward.default": "not yet",
    "aten._pdist_forward.default": "not yet",
    "aten._fft_r2c.default": "not yet (no complex numbers)",
    "aten._fft_c2r.default": "not yet (no complex numbers)",
    "aten.grid_sampler_2d.default": "not yet",
    "aten.col2im.default": "not yet",
}


def markdown() -> str:
    """The table as docs/torch.md shows it: every row, then the Core ATen ops with none."""
    lines = ["| ATen op | status | refcomp | notes |", "| --- | --- | --- | --- |"]
    for row in ROWS:
        lines.append(
            f"| `{row.name}` | yes | `{row.fn.__module__.rsplit('.', 1)[-1]}.{row.fn.__name__}` | "
            f"{row.notes} |"
        )
    for name, why in sorted(NOT_MAPPED.items()):
        lines.append(f"| `{name}` | no | | {why} |")
    return "\n".join(lines)
