"""`rc.nn.scaled_dot_product_attention` with PyTorch's signature and meaning, from Tensor methods.

softmax(q k^T * scale + bias) v over the last two axes. A boolean `attn_mask` (a comparison, a logical
operation or `.bool()`: see ops.tensor.BoolTensor) says which keys take part, as PyTorch's bool mask;
a float one is added to the scores. Blocked scores are selected to -inf (a true select), so their
weights are exactly 0, and a query row with no key left gives zeros, as PyTorch does (its softmax would
be 0 / 0). That row test reads the mask alone, after the product with v, so the scores' softmax keeps
the shape the search turns into one online-softmax kernel.
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from ..symbolic.dims import dims_equal
from .core import TensorCore, computed_in_float32, constant, iota, is_boolean, lift
from .elementwise import where
from .random_tensors import dropout
from .provenance import user_op


@user_op
@computed_in_float32
def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale=None,
    enable_gqa: bool = False,
    causal=None,
    mask=None,
    generator=None,
):
    """torch.nn.functional.scaled_dot_product_attention. `is_causal` lets query i see keys j <= i (top-left
    aligned; with attn_mask too, both apply); `scale` defaults to 1/sqrt(d); `enable_gqa`: k and v may
    have fewer heads (axis -3) than q, each shared by q's heads in groups. `causal=` and `mask=` are
    refcomp's older names of is_causal and attn_mask. dropout_p drops attention weights whenever it is
    not 0, as PyTorch does (there is no training flag), from the default generator or `generator=`."""
    q, k, v = lift(query), lift(key), lift(value)
    is_causal = _alias(is_causal, False, causal, "is_causal", "causal")
    attn_mask = _alias(attn_mask, None, mask, "attn_mask", "mask")
    if attn_mask is not None and not isinstance(attn_mask, TensorCore):
        raise ShapeError(
            f"scaled_dot_product_attention: attn_mask must be a tensor (boolean: True takes part; float: "
            f"added to the scores), got {attn_mask!r}; the fourth argument is PyTorch's attn_mask, so "
            f"a causal mask is is_causal=True"
        )
    if not isinstance(is_causal, bool):
        raise ShapeError(f"scaled_dot_product_attention: is_causal must be a bool, got {is_causal!r}")
    if not isinstance(dropout_p, numbers.Real) or isinstance(dropout_p, bool) or not 0.0 <= dropout_p <= 1.0:
        raise ShapeError(
            f"scaled_dot_product_attention: dropout_p must be a number in [0, 1], got {dropout_p!r}"
        )
    if enable_gqa and q.ndim >= 3 and not dims_equal(q.shape[-3], k.shape[-3]):
        heads, groups = q.shape[-3], k.shape[-3]
        if not (isinstance(heads, int) and isinstance(groups, int) and heads % groups == 0):
            raise ShapeError(
                f"scaled_dot_product_attention: {heads} query heads cannot share {groups} key/value heads"
            )
        k, v = k.repeat_interleave(heads // groups, -3), v.repeat_interleave(heads // groups, -3)
    d = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d) if isinstance(d, int) else constant(d).rsqrt()
    scores = (q @ k.transpose(-2, -1)) * scale
    tq, tk = scores.shape[-2:]
    blocked = iota((tq, tk), 1) > iota((tq, tk), 0) if is_causal else None
    if blocked is not None:
        scores = where(blocked, -math.inf, scores)
    boolean = is_boolean(attn_mask)
    if attn_mask is not None:
        scores = where(attn_mask, scores, -math.inf) if boolean else scores + attn_mask
    weights = scores.softmax(-1)
    out = (dropout(weights, dropout_p, generator=generator) if dropout_p else weights) @ v
    if attn_mask is None:  # no row is blocked whole: causal rows see at least key 0
        return out
    if boolean:
        open_rows = (attn_mask if blocked is None else attn_mask.logical_and(blocked.logical_not())).amax(-1)
    else:
        bias = attn_mask if blocked is None else where(blocked, -math.inf, attn_mask)
        open_rows = bias.amax(-1).ne(-math.inf)  # NaN in the mask stays NaN, as PyTorch's
    return where(open_rows.unsqueeze(-1), out, 0.0)


def _alias(value, default, old, name: str, old_name: str):
    if old is None:
        return value
    if value is not default:
        raise ShapeError(f"scaled_dot_product_attention: give {name}= or {old_name}=, not both")
    return old
