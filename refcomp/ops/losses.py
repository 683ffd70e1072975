"""Class ids and losses with torch.nn.functional's signatures: one_hot, cross_entropy, binary_cross_entropy.

Class ids are int32 inputs, read by a Gather from a table built with Iota, so an id outside the table
is refused at run time (a GPU would read anywhere). cross_entropy's table has a column more than there
are classes: 1 in the row of `ignore_index`, whose class columns are 0, so an ignored position adds
nothing and is not counted. PyTorch's default ignore_index, -100, cannot be a row: an int32 id of -100
is refused at run time like any other outside [0, C), and float32 class ids (an extension: PyTorch
takes only integer ids) compare with every class instead, so any ignore_index works there.
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import dims_equal
from .core import TensorCore, computed_in_float32, iota, is_integer, lift
from .elementwise import where
from .primitives import make_node
from .provenance import user_op

REDUCTIONS = ("mean", "sum", "none")


def _rows(table, ids):
    """table[ids]: the rows of a (V, D) table picked by int32 ids (checked at run time)."""
    return TensorCore.from_node(make_node("Gather", (table.edge, ids.edge)))


@user_op
def one_hot(tensor, num_classes: int = -1):
    """int32 ids -> (..., num_classes) of 0.0/1.0 (PyTorch: int64 0/1); an id outside [0, num_classes) is
    refused at run time. PyTorch's default num_classes=-1 counts classes from the data, which a graph
    built before its data cannot do."""
    ids = lift(tensor)
    if not isinstance(num_classes, numbers.Integral) or num_classes < 0:
        raise ShapeError(
            f"one_hot of {ids.label}: give num_classes (PyTorch's -1 takes it from the largest id, "
            f"which is not known when the graph is built), got {num_classes!r}"
        )
    if not is_integer(ids):
        raise ShapeError(f"one_hot of {ids.label}: the ids must be an integer tensor, got {ids.dtype}")
    return _rows(iota((num_classes, num_classes), 0).eq(iota((num_classes, num_classes), 1)), ids)


def _reduced(loss, reduction: str, who: str, count=None):
    if reduction == "mean":
        return loss.sum() / count if count is not None else loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _check(who: str, reduction, size_average, reduce) -> None:
    if size_average is not None or reduce is not None:
        raise ShapeError(
            f"{who}: size_average and reduce are PyTorch's deprecated spellings of reduction=; use reduction="
        )
    if reduction not in REDUCTIONS:
        raise ShapeError(f"{who}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _class_rows(target, classes, ignore_index: int, axis: int, label: str):
    """(one-hot of the target along `axis`, zero where ignored; 1.0 where ignored): from int32 ids
    through a Gather, or from float32 ids by comparison."""
    if not is_integer(target):
        picked = target.unsqueeze(axis).eq(iota((classes,) + (1,) * (target.ndim - axis), 0))
        ignored = target.eq(float(ignore_index))
        return where(ignored.unsqueeze(axis), 0.0, picked), ignored
    rows = classes
    if ignore_index >= 0 and not (isinstance(classes, int) and ignore_index < classes):
        if not isinstance(classes, int):
            raise ShapeError(
                f"cross_entropy of {label}: ignore_index {ignore_index} needs a known class count, "
                f"not {classes}"
            )
        rows = (
            ignore_index + 1
        )  # rows between the classes and ignore_index are NaN: such ids are errors in PyTorch
    i, j = iota((rows, classes + 1), 0), iota((rows, classes + 1), 1)
    flag = i.eq(float(ignore_index))
    table = where(flag, j.eq(classes), where(i < classes, i.eq(j), math.nan))
    gathered = _rows(table, target)  # (..., C + 1)
    picked, ignored = gathered[..., :classes], gathered[..., classes]
    if axis != picked.ndim - 1:
        picked = picked.permute(*(list(range(axis)) + [picked.ndim - 1] + list(range(axis, picked.ndim - 1))))
    return picked, ignored


@user_op
@computed_in_float32
def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """torch.nn.functional.cross_entropy: classes along axis 1 (axis 0 of unbatched (C,) logits); target
    int32 class ids (N, ...) or class probabilities of the logits' shape. With ids, `mean` divides by
    the summed weights of the positions not ignored (their count without `weight`), as PyTorch."""
    logits, target = lift(input), lift(target)
    _check("cross_entropy", reduction, size_average, reduce)
    if not isinstance(ignore_index, numbers.Integral) or isinstance(ignore_index, bool):
        raise ShapeError(f"cross_entropy: ignore_index must be an int, got {ignore_index!r}")
    if not isinstance(label_smoothing, numbers.Real) or not 0.0 <= label_smoothing <= 1.0:
        raise ShapeError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    axis = 0 if logits.ndim == 1 else 1
    classes = logits.shape[axis]
    log_p = logits.log_softmax(axis)
    w = None if weight is None else lift(weight).reshape((classes,) + (1,) * (logits.ndim - axis - 1))
    weighted = log_p if w is None else log_p * w
    if target.ndim == logits.ndim and not is_integer(target):  # class probabilities
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / classes
        loss = -(weighted * target).sum(axis)
        return _reduced(loss, reduction, "cross_entropy")
    if target.ndim != logits.ndim - 1:
        raise ShapeError(
            f"cross_entropy: the target {target.label} must be class ids of the logits' shape without "
            f"axis {axis}, or probabilities of {logits.label}'s shape"
        )
    picked, ignored = _class_rows(target, classes, int(ignore_index), axis, logits.label)
    loss = -where(picked, weighted, 0.0).sum(axis)  # a select: -inf elsewhere in the row stays out
    counted = picked.sum(axis) if w is None else (picked * w).sum(axis)
    if label_smoothing:
        smooth = where(ignored, 0.0, -weighted.sum(axis))
        loss = loss * (1.0 - label_smoothing) + smooth * (label_smoothing / classes)
    return _reduced(loss, reduction, "cross_entropy", counted.sum())


@user_op
@computed_in_float32
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """-w (t log p + (1 - t) log(1 - p)), each log clamped at -100 as PyTorch does (p = 0 or 1 stays
    finite)."""
    p, t = lift(input), lift(target)
    _check("binary_cross_entropy", reduction, size_average, reduce)
    loss = -(t * p.log().maximum(-100.0) + (1.0 - t) * (1.0 - p).log().maximum(-100.0))
    return _reduced(loss if weight is None else loss * weight, reduction, "binary_cross_entropy")


# --- elementwise losses of an input and a target (broadcast), reduced as `reduction` says -------------
def _difference(who: str, input, target, reduction, size_average=None, reduce=None):
    _check(who, reduction, size_average, reduce)
    return lift(input) - lift(target)


def _weighted(loss, weight):
    return loss if weight is None else loss * weight


def _weight_averaged(loss, weight, reduction: str, who: str):
    """mse_loss's and l1_loss's `weight`, of the loss's own shape: their mean is then divided by the
    weights' sum, not the count (PyTorch's)."""
    if weight is None:
        return _reduced(loss, reduction, who)
    weight = lift(weight)
    if weight.ndim != loss.ndim or not all(dims_equal(a, b) for a, b in zip(weight.shape, loss.shape)):
        raise ShapeError(f"{who}: the weight {weight.label} must have the input's shape {loss.shape}")
    if reduction == "mean":
        return (loss * weight).sum() / weight.sum()
    return _reduced(loss * weight, reduction, who)


@user_op
@computed_in_float32
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    d = _difference("mse_loss", input, target, reduction, size_average, reduce)
    return _weight_averaged(d * d, weight, reduction, "mse_loss")


@user_op
@computed_in_float32
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    d = _difference("l1_loss", input, target, reduction, size_average, reduce)
    return _weight_averaged(d.abs(), weight, reduction, "l1_loss")


@user_op
@computed_in_float32
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta = 0: the L1 loss), as PyTorch."""
    d = _difference("smooth_l1_loss", input, target, reduction, size_average, reduce).abs()
    if not isinstance(beta, numbers.Real) or beta < 0:
        raise ShapeError(f"smooth_l1_loss: beta must be a non-negative number, got {beta!r}")
    loss = d if beta == 0 else where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduced(loss, reduction, "smooth_l1_loss")


@user_op
@computed_in_float32
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    d = _difference("huber_loss", input, target, reduction).abs()
    if not isinstance(delta, numbers.Real) or delta <= 0:
        raise ShapeError(f"huber_loss: delta must be a positive number, got {delta!r}")
    loss = where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduced(_weighted(loss, weight), reduction, "huber_loss")


@user_op
@computed_in_float32
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """(1 - t) x - w_p log sigmoid(x), w_p = 1 + (pos_weight - 1) t: PyTorch's form, finite for every
    finite logit."""
    x, t = lift(input), lift(target)
    _check("binary_cross_entropy_with_logits", reduction, size_average, reduce)
    log_sigmoid = -(-x).relu() - (-x.abs()).exp().log1p()  # -softplus(-x), without overflow
    if pos_weight is not None:
        log_sigmoid = log_sigmoid * ((lift(pos_weight) - 1.0) * t + 1.0)
    loss = _weighted((1.0 - t) * x - log_sigmoid, weight)
    return _reduced(loss, reduction, "binary_cross_entropy_with_logits")


@user_op
@computed_in_float32
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    """target (log target - input), with 0 where the target is 0 (or exp(target) (target - input) for a
    log target); reduction "batchmean" divides the sum by the batch, "mean" by every element."""
    x, t = lift(input), lift(target)
    _check("kl_div", "mean" if reduction == "batchmean" else reduction, size_average, reduce)
    if log_target:
        loss = t.exp() * (t - x)
    else:
        loss = where(t.eq(0.0), 0.0, t * t.log()) - t * x
    if reduction == "batchmean":
        return loss.sum() / (x.shape[0] if x.ndim else 1)
    return _reduced(loss, reduction, "kl_div")
