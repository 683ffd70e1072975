"""Torch-comparison cases (tests/torch_registry.py) of `rc.nn`, against torch.nn.functional: positional
forms as PyTorch writes them, the defaults, and the refusals where refcomp cannot do what PyTorch does."""
import refcomp as rc
from api_helpers import torch
from torch_registry import A, a, case, refusal

F = torch.nn.functional if torch is not None else None
nn = rc.nn


def same(name, args=(), kwargs=None, inputs=(), rtol=2e-6, atol=1e-6, **kw):
    """nn.name(*tensors, *args, **kwargs) against F.name with the same arguments."""
    kwargs = kwargs or {}
    case(f"nn.{name}", lambda *xs: getattr(nn, name)(*xs, *args, **kwargs),
         lambda *ts: getattr(F, name)(*ts, *args, **kwargs), *inputs, rtol=rtol, atol=atol, **kw)


V = a(300, lo=-20, hi=20, edges=True)
for name, args, rtol, atol in (
    ("relu", (), 0, 0),
    ("silu", (), 2e-6, 1e-7),
    ("gelu", (), 2e-6, 1e-7),
    ("softsign", (), 2e-7, 0),
    ("relu6", (), 0, 0),
    ("hardtanh", (), 0, 0),
    ("hardtanh", (-0.5, 2.0), 0, 0),
    ("hardsigmoid", (), 2e-7, 0),
    ("hardswish", (), 2e-7, 1e-7),
    ("leaky_relu", (0.2,), 1e-7, 0),
    ("leaky_relu", (), 1e-7, 0),
    ("elu", (0.7,), 5e-7, 1e-7),
    ("elu", (), 5e-7, 1e-7),
    ("selu", (), 5e-7, 1e-7),
    ("celu", (1.5,), 5e-7, 1e-7),
    ("softplus", (), 4e-6, 1e-30),
    ("softplus", (2.0, 10.0), 4e-6, 1e-30),
    ("mish", (), 2e-6, 1e-7),
    ("logsigmoid", (), 5e-7, 1e-7),
):
    same(
        name,
        args,
        inputs=(V,),
        rtol=rtol,
        atol=atol,
        exact=rtol == atol == 0,
        emulate=name in ("gelu", "mish") and not args,
    )
same("gelu", kwargs={"approximate": "none"}, inputs=(V,), rtol=2e-6, atol=1e-7)
same("gelu", kwargs={"approximate": "tanh"}, inputs=(V,), rtol=5e-6, atol=5e-7)
same("relu", kwargs={"inplace": False}, inputs=(V,), exact=True)
for name in ("softmax", "log_softmax", "softmin"):
    same(name, (1,), inputs=(a(3, 4, 5),), rtol=1e-6, atol=1e-7)
    same(name, kwargs={"dim": 0}, inputs=(a(3, 4),), rtol=1e-6, atol=1e-7)
    same(name, (-1,), {"dtype": torch.float16}, inputs=(a(3, 4),), rtol=2e-3, atol=1e-3)
    refusal(f"nn.{name}", lambda x, n=name: getattr(nn, n)(x), "give dim", inputs=(a(3, 4),))
same("dropout", kwargs={"training": False}, inputs=(V,), exact=True)
same("dropout", (0.0,), inputs=(V,), exact=True)
same("dropout", (1.0,), inputs=(V,), exact=True)
same("dropout", (0.3, False), inputs=(V,), exact=True)
refusal("nn.dropout", lambda x: nn.dropout(x, 1.5, False), "probability", inputs=(V,))

same("linear", inputs=(a(2, 5, 4), a(3, 4), a(3)), rtol=1e-6, emulate=True)
same("linear", inputs=(a(2, 4), a(3, 4)), rtol=1e-6)
LN = (a(2, 3, 4, 5, lo=-3, hi=5), a(4, 5), a(4, 5))
same("layer_norm", ((4, 5),), inputs=LN[:1], rtol=1e-5, atol=1e-6)
case(
    "nn.layer_norm",
    lambda x, w, b: nn.layer_norm(x, (4, 5), w, b, 1e-3),
    lambda x, w, b: F.layer_norm(x, (4, 5), w, b, 1e-3),
    *LN,
    rtol=1e-5,
    atol=1e-6,
    emulate=True,
)
case(
    "nn.layer_norm",
    lambda x, w, b: nn.layer_norm(x, [5], w[0], bias=b[0]),
    lambda x, w, b: F.layer_norm(x, [5], w[0], bias=b[0]),
    *LN,
    rtol=1e-5,
    atol=1e-6,
)
case(
    "nn.layer_norm",
    lambda x, w, b: nn.layer_norm(x, w[0], b[0]),
    lambda x, w, b: F.layer_norm(x, (5,), w[0], b[0]),
    *LN,
    rtol=1e-5,
    atol=1e-6,
)  # refcomp's older form: weight and bias second
refusal("nn.layer_norm", lambda x: nn.layer_norm(x, (3,)), "normalized_shape", inputs=LN[:1])
same("rms_norm", ((5,),), inputs=LN[:1], rtol=1e-5, atol=1e-6)
case(
    "nn.rms_norm",
    lambda x, w: nn.rms_norm(x, (4, 5), w, 1e-3),
    lambda x, w: F.rms_norm(x, (4, 5), w, 1e-3),
    *LN[:2],
    rtol=1e-5,
    atol=1e-6,
)
case(
    "nn.rms_norm",
    lambda x, w: nn.rms_norm(x.half(), (5,), w[0].half()),
    lambda x, w: F.rms_norm(x.half(), (5,), w[0].half()),
    *LN[:2],
    rtol=2e-3,
    atol=2e-3,
)  # eps None: float16's own
case(
    "nn.embedding",
    lambda i, w: nn.embedding(i, w),
    lambda i, w: F.embedding(i, w),
    a(2, 3, ids=True, high=5),
    a(5, 4),
    exact=True,
)
case(
    "nn.embedding",
    lambda i, w: nn.embedding(i, w, 0),
    lambda i, w: F.embedding(i, w, 0),
    a(4, ids=True, high=5),
    a(5, 4),
    exact=True,
)
refusal(
    "nn.embedding",
    lambda i, w: nn.embedding(i, w, max_norm=1.0),
    "max_norm",
    inputs=(a(4, ids=True), a(5, 4)),
)
case(
    "nn.one_hot", lambda i: nn.one_hot(i, 5), lambda i: F.one_hot(i, 5), a(2, 3, ids=True, high=5), exact=True
)
refusal("nn.one_hot", lambda i: nn.one_hot(i), "num_classes", inputs=(a(3, ids=True),))

for d in (1, 2, 3):
    spatial = (7, 6, 5)[:d]
    x, w, b = a(2, 4, *spatial), a(6, 2, *(3,) * d), a(6)
    same(f"conv{d}d", inputs=(x, a(6, 4, *(2,) * d), b), rtol=1e-5, atol=1e-5, emulate=d == 2)
    same(
        f"conv{d}d", (None, 2, 1, 1, 2), inputs=(x, w), rtol=1e-5, atol=1e-5
    )  # bias, stride, padding, dilation, groups
    same(f"conv{d}d", kwargs={"padding": "same"}, inputs=(x, a(6, 4, *(2,) * d), b), rtol=1e-5, atol=1e-5,
         emulate=d == 2)  # an even kernel: the odd padding element at the end, as PyTorch
    same(f"conv{d}d", kwargs={"padding": "same", "dilation": 2, "groups": 2}, inputs=(x, w), rtol=1e-5,
         atol=1e-5)
    same(f"conv{d}d", kwargs={"padding": "valid"}, inputs=(x, a(6, 4, *(3,) * d)), rtol=1e-5, atol=1e-5)
    same(f"conv_transpose{d}d", (None, 2, 1, 1), inputs=(x, a(4, 3, *(3,) * d)), rtol=1e-5, atol=1e-5)
    same(
        f"conv_transpose{d}d",
        kwargs={"stride": 1, "groups": 2},
        inputs=(x, a(4, 3, *(2,) * d), a(6)),
        rtol=1e-5,
        atol=1e-5,
    )
    xs = a(2, 3, *spatial, edges=True)
    same(f"max_pool{d}d", (2,), inputs=(xs,), exact=True)
    same(
        f"max_pool{d}d", (3, 2, 1, 1, True), inputs=(xs,), exact=True
    )  # stride, padding, dilation, ceil_mode
    same(f"max_pool{d}d", (2,), {"return_indices": True}, inputs=(a(2, 3, *spatial),), exact=True)
    same(f"avg_pool{d}d", (2,), inputs=(a(2, 3, *spatial),), rtol=1e-6)
    same(
        f"avg_pool{d}d", (3, 2, 1, True, False), inputs=(a(2, 3, *spatial),), rtol=1e-6
    )  # ceil_mode, count_include_pad
    case(
        f"nn.max_unpool{d}d",
        lambda x, d=d: getattr(nn, f"max_unpool{d}d")(
            *getattr(nn, f"max_pool{d}d")(x, 2, return_indices=True), 2
        ),
        lambda t, d=d: getattr(F, f"max_unpool{d}d")(
            *getattr(F, f"max_pool{d}d")(t, 2, return_indices=True), 2
        ),
        a(1, 2, *(4,) * d),
        exact=True,
    )

Q, K = a(2, 3, 4, 8), a(2, 3, 6, 8)
same("scaled_dot_product_attention", inputs=(Q, K, K), rtol=1e-5, atol=1e-6, emulate=True)
same("scaled_dot_product_attention", (None, 0.0, True), inputs=(Q, K, K), rtol=1e-5, atol=1e-6)
same(
    "scaled_dot_product_attention",
    kwargs={"is_causal": True, "scale": 0.3},
    inputs=(a(2, 3, 6, 8), K, K),
    rtol=1e-5,
    atol=1e-6,
)
same(
    "scaled_dot_product_attention",
    kwargs={"enable_gqa": True},
    inputs=(a(2, 6, 4, 8), K, K),
    rtol=1e-5,
    atol=1e-6,
)
same("scaled_dot_product_attention", inputs=(Q, K, K, a(4, 6)), rtol=1e-5, atol=1e-6)  # a float mask: added
for causal in (False, True):
    case(
        "nn.scaled_dot_product_attention",
        lambda q, k, v, m, c=causal: nn.scaled_dot_product_attention(q, k, v, m > 0.5, is_causal=c),
        lambda q, k, v, m, c=causal: F.scaled_dot_product_attention(q, k, v, m > 0.5, is_causal=c),
        Q,
        K,
        K,
        a(4, 6, lo=0, hi=1, values=(0.9,) * 6 + (0.0,) * 6 + tuple(i / 12 for i in range(12))),
        rtol=1e-5,
        atol=1e-6,
        emulate=causal,
    )  # a row kept whole, one blocked whole (zeros), random ones
same(
    "scaled_dot_product_attention", (None, 1.0), inputs=(Q, K, K), exact=True
)  # dropout_p applies in eval too: all dropped
refusal(
    "nn.scaled_dot_product_attention",
    lambda q, k: nn.scaled_dot_product_attention(q, k, k, True),
    "is_causal=True",
    inputs=(Q, K),
)

same("normalize", inputs=(a(4, 6),), rtol=2e-6, atol=1e-7)
same("normalize", (1.0, 0), inputs=(a(4, 6),), rtol=2e-6, atol=1e-7)
same("normalize", kwargs={"p": 3.0, "dim": 1}, inputs=(a(4, 6),), rtol=2e-6, atol=1e-7)
for widths, mode, value in (
    ((1, 2), "constant", 3.5),
    ((2, 1, 1, 3), "reflect", 0.0),
    ((2, 1, 1, 3), "replicate", 0.0),
    ((3, 1, 2, 2), "circular", 0.0),
    ((-1, 2, 1, -2), "constant", 0.0),
):
    same("pad", (widths, mode, value), inputs=(a(1, 2, 5, 6),), exact=True)
same("interpolate", kwargs={"size": (8, 3)}, inputs=(a(1, 2, 5, 7),), rtol=1e-5, atol=2e-6)
same("interpolate", (None, 2, "bilinear"), inputs=(a(1, 2, 5, 7),), rtol=1e-5, atol=2e-6)
same(
    "interpolate",
    kwargs={"size": 10, "mode": "linear", "align_corners": True},
    inputs=(a(2, 3, 6),),
    rtol=1e-5,
    atol=2e-6,
)

LOGITS, TARGET = a(4, 5, 3, lo=-4, hi=4), a(4, 3, ids=True, high=5)
for kwargs in (
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"ignore_index": 2},
    {"ignore_index": 2, "reduction": "none"},
    {"label_smoothing": 0.2},
    {"ignore_index": 1, "label_smoothing": 0.1, "reduction": "sum"},
):
    same("cross_entropy", kwargs=kwargs, inputs=(LOGITS, TARGET), rtol=1e-6, atol=1e-6, emulate=not kwargs)
    case(
        "nn.cross_entropy",
        lambda x, t, w, k=kwargs: nn.cross_entropy(x, t, w, **k),
        lambda x, t, w, k=kwargs: F.cross_entropy(x, t, w, **k),
        LOGITS,
        TARGET,
        a(5, lo=0.1, hi=2),
        rtol=1e-6,
        atol=1e-6,
    )
case("nn.cross_entropy", lambda x, t: nn.cross_entropy(x, t.softmax(1), label_smoothing=0.3),
     lambda x, t: F.cross_entropy(x, t.softmax(1), label_smoothing=0.3), LOGITS, LOGITS, rtol=1e-6, atol=1e-6)
case(
    "nn.cross_entropy",
    lambda x, t: nn.cross_entropy(x, t),
    lambda x, t: F.cross_entropy(x, t),
    a(5),
    A((), ids=True, high=5),
    rtol=1e-6,
    atol=1e-6,
)  # unbatched
case(
    "nn.cross_entropy",
    lambda x, t: nn.cross_entropy(x, (t * 0.0 + 2.0) * (t < 0.5) - 100.0 * (t >= 0.5)),
    lambda x, t: F.cross_entropy(x, ((t * 0.0 + 2.0) * (t < 0.5) - 100.0 * (t >= 0.5)).long()),
    a(6, 5),
    a(6, lo=0, hi=1),
    rtol=1e-6,
    atol=1e-6,
)  # float32 ids (beyond PyTorch): the default ignore_index -100 works there
refusal(
    "nn.cross_entropy",
    lambda x, t: nn.cross_entropy(x, t, size_average=True),
    "reduction=",
    inputs=(LOGITS, TARGET),
)
P, Y = a(5, lo=0, hi=1, values=(0.0, 0.3, 1.0, 0.9, 0.5)), a(5, lo=0, hi=1)
for args in ((), (None, None, None, "sum"), (None, None, None, "none")):
    same("binary_cross_entropy", args, inputs=(P, Y), rtol=1e-6, atol=1e-6)
same("binary_cross_entropy", inputs=(P, Y, a(5, lo=0, hi=2)), rtol=1e-6, atol=1e-6)

# normalisations over channels, adaptive pooling, similarities, gated and plain activations, losses
IMG, CH = a(2, 6, 5, 4), a(6)
same("batch_norm", inputs=(IMG, a(6), a(6, lo=0.5, hi=2.0), CH, CH), rtol=1e-5, atol=1e-5, emulate=True)
same("batch_norm", (None, None, None, None, True), inputs=(IMG,), rtol=1e-5, atol=1e-5)  # batch statistics
refusal("nn.batch_norm", lambda x, m, v: nn.batch_norm(x, m, v, training=True), "in place",
        inputs=(IMG, a(6), a(6, lo=0.5, hi=2.0)))
case("nn.group_norm", lambda x, w, b: nn.group_norm(x, 3, w, b), lambda x, w, b: F.group_norm(x, 3, w, b),
     IMG, CH, CH, rtol=1e-5, atol=1e-5, emulate=True)
same("group_norm", (2,), inputs=(a(2, 4, 7),), rtol=1e-5, atol=1e-5)
same("instance_norm", kwargs={"eps": 1e-3}, inputs=(IMG,), rtol=1e-5, atol=1e-5)
refusal("nn.instance_norm", lambda x, m, v: nn.instance_norm(x, m, v), "running", inputs=(IMG, CH, CH))
for d, size in ((1, 4), (2, (3, 2)), (2, 1), (2, (None, 3)), (3, (2, 3, 2))):
    same(f"adaptive_avg_pool{d}d", (size,), inputs=(a(2, 3, *(7, 5, 4)[:d], edges=d == 1),), rtol=1e-6,
         emulate=d == 2 and size == 1)
same("cosine_similarity", inputs=(a(4, 6), a(4, 6)), rtol=1e-5, atol=1e-6)
same("cosine_similarity", (0, 1e-3), inputs=(a(4, 6), a(1, 6, lo=-1e-3, hi=1e-3)), rtol=1e-5, atol=1e-6)
same("pairwise_distance", inputs=(a(4, 6), a(4, 6)), rtol=1e-5)
same("pairwise_distance", (1.0, 1e-6, True), inputs=(a(4, 6), a(6)), rtol=1e-5)
for name in ("tanh", "sigmoid"):
    same(name, inputs=(V,), rtol=2e-6, atol=1e-7)
same("glu", inputs=(a(3, 8, edges=True),), rtol=2e-6)
same("glu", (0,), inputs=(a(4, 3),), rtol=2e-6)
P, Q = a(4, 5, lo=-4, hi=4), a(4, 5, lo=-4, hi=4)
for name in ("mse_loss", "l1_loss"):
    same(name, inputs=(P, Q), rtol=1e-6, emulate=name == "mse_loss")
    same(name, kwargs={"reduction": "none"}, inputs=(P, Q), rtol=1e-6)
    same(name, kwargs={"weight": None, "reduction": "sum"}, inputs=(P, Q), rtol=1e-6)
    case(f"nn.{name}", lambda x, y, w, n=name: getattr(nn, n)(x, y, weight=w),
         lambda x, y, w, n=name: getattr(F, n)(x, y, weight=w), P, Q, a(4, 5, lo=0, hi=2), rtol=1e-6)
same("smooth_l1_loss", inputs=(P, Q), rtol=1e-6)
same("smooth_l1_loss", kwargs={"beta": 0.5, "reduction": "none"}, inputs=(P, Q), rtol=1e-6)
same("smooth_l1_loss", kwargs={"beta": 0.0}, inputs=(P, Q), rtol=1e-6)
same("huber_loss", inputs=(P, Q), rtol=1e-6)
same("huber_loss", ("sum", 2.0), inputs=(P, Q), rtol=1e-6)
same("huber_loss", kwargs={"weight": None, "delta": 0.5, "reduction": "none"}, inputs=(P, Q), rtol=1e-6)
LOGITS, PROB = a(4, 5, lo=-30, hi=30, edges=True), a(4, 5, lo=0, hi=1)
same("binary_cross_entropy_with_logits", inputs=(LOGITS, PROB), rtol=1e-6)
same("binary_cross_entropy_with_logits", kwargs={"reduction": "none"}, inputs=(LOGITS, PROB), rtol=1e-6)
case("nn.binary_cross_entropy_with_logits",
     lambda x, t, w: nn.binary_cross_entropy_with_logits(x, t, pos_weight=w),
     lambda x, t, w: F.binary_cross_entropy_with_logits(x, t, pos_weight=w), a(4, 5), PROB, a(5, lo=0, hi=3),
     rtol=1e-6)
LOGP = a(4, 5, lo=-5, hi=0)
same("kl_div", inputs=(LOGP, a(4, 5, values=(0.0,) * 5 + (0.25,) * 15)), rtol=1e-6)
same("kl_div", kwargs={"reduction": "batchmean"}, inputs=(LOGP, PROB), rtol=1e-6)
same("kl_div", kwargs={"reduction": "none", "log_target": True}, inputs=(LOGP, LOGP), rtol=1e-6)
