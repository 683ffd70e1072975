"""The PyTorch-named API against PyTorch on the CPU, beyond the registered cases of every api.md entry
(tests/torch_cases_*.py, run by tests/test_torch_cases.py): rounding ties, reductions with dim=/keepdim=,
losses, interpolation, sorting, transposed convolution and indexing edges, and the errors of misuse."""
import numpy as np
import pytest

import refcomp as rc
from refcomp.errors import ShapeError
from api_helpers import close, exact, needs_torch, run, torch

pytestmark = needs_torch


def values(rng, lo, hi, n=400):
    return rng.uniform(lo, hi, n).astype(np.float32)


def test_round_is_half_to_even_and_trunc_keeps_huge_values(rng):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.4999998, 8388609.0, -1e30, 2.5000002], np.float32)
    exact(run(lambda t: t.round(), x), torch.round(torch.from_numpy(x)).numpy())
    exact(
        run(lambda t: t.round(decimals=1), np.array([1.25, 2.36], np.float32)),
        np.array([1.2, 2.4], np.float32),
    )
    exact(run(lambda t: t.trunc(), x), torch.trunc(torch.from_numpy(x)).numpy())


def test_lerp_and_masked_fill(rng):
    a, b, w = values(rng, -5, 5, 50), values(rng, -5, 5, 50), values(rng, -0.5, 1.5, 50)
    close(
        run(lambda x, y, z: x.lerp(y, z), a, b, w),
        torch.lerp(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(w)).numpy(),
        rtol=1e-6,
        atol=1e-6,
    )
    x = rng.standard_normal((3, 4)).astype(np.float32)
    mask = (rng.random((1, 4)) > 0.5).astype(np.float32)
    exact(run(lambda t, m: t.masked_fill(m, -1e4), x, mask),
          torch.from_numpy(x).masked_fill(torch.from_numpy(mask).bool(), -1e4).numpy())


@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_with_dim_and_keepdim(rng, keepdim):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x[0, 1, 2] = 0.0
    t = torch.from_numpy(x.astype(np.float64))
    for name, want in [
        ("sum", t.sum(dim=1, keepdim=keepdim)),
        ("mean", t.mean(dim=1, keepdim=keepdim)),
        ("var", t.var(dim=1, keepdim=keepdim)),
        ("std", t.std(dim=1, keepdim=keepdim)),
        ("prod", t.prod(dim=1, keepdim=keepdim)),
        ("logsumexp", t.logsumexp(dim=1, keepdim=keepdim)),
        ("any", t.any(dim=1, keepdim=keepdim).double()),
        ("all", t.all(dim=1, keepdim=keepdim).double()),
        ("argmax", t.argmax(dim=1, keepdim=keepdim).double()),
        ("argmin", t.argmin(dim=1, keepdim=keepdim).double()),
    ]:
        close(run(lambda a: getattr(a, name)(dim=1, keepdim=keepdim), x), want.numpy(), rtol=2e-6, atol=1e-6)
    close(
        run(lambda a: a.var(1), x), t.var(1).numpy(), rtol=2e-6
    )  # a positional dim is PyTorch's: correction 1
    close(run(lambda a: a.var(axis=1, ddof=0), x), x.astype(np.float64).var(1), rtol=2e-6)  # NumPy's ddof
    close(run(lambda a: a.std(1, correction=2), x), t.std(dim=1, correction=2).numpy(), rtol=2e-6)
    close(run(lambda a: a.var(dim=1, unbiased=False), x), t.var(dim=1, unbiased=False).numpy(), rtol=2e-6)


def test_flattened_argmax_argmin_softmin_and_logsumexp_edges(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = torch.from_numpy(x)
    exact(run(lambda a: a.argmax(), x), np.float32(t.argmax().item()))
    exact(run(lambda a: a.argmin(), x), np.float32(t.argmin().item()))
    close(
        run(lambda a: a.softmin(dim=0), x), torch.nn.functional.softmin(t.double(), dim=0).numpy(), rtol=1e-6
    )
    close(
        run(lambda a: rc.nn.softmin(a, 1), x),
        torch.nn.functional.softmin(t.double(), dim=1).numpy(),
        rtol=1e-6,
    )
    edges = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 1.0], [1e30, 1e30]], np.float32)
    close(
        run(lambda a: a.logsumexp(dim=1), edges),
        torch.logsumexp(torch.from_numpy(edges).double(), dim=1).numpy(),
        rtol=1e-6,
    )
    with pytest.raises(ShapeError, match="axis= or dim="):
        rc.input("x", (3, 4)).sum(0, axis=1)
    with pytest.raises(ShapeError, match="symbolic length"):
        rc.input("x", ("B", 4)).prod(0)


def test_normalize(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    x[2] = 0.0  # eps keeps a zero row finite
    for p, dim in ((2.0, 1), (1.0, 0), (3.0, 1)):
        want = torch.nn.functional.normalize(torch.from_numpy(x).double(), p=p, dim=dim).numpy()
        close(run(lambda a: rc.nn.normalize(a, p=p, dim=dim), x), want, rtol=2e-6, atol=1e-7)


def test_the_new_functions_compile_and_match_the_reference_on_the_emulator(rng):
    """One program through the whole pipeline (search, CUDA, g++): every function above in one graph."""
    x = rc.input("x", ("B", 6))
    y = rc.input("y", ("B", 6))
    parts = [
        x.tan(),
        x.atan(),
        (x * 0.3).asin(),
        (x * 0.3).acos(),
        x.sinh(),
        x.cosh(),
        x.asinh(),
        (x.abs() + 1.0).acosh(),
        (x * 0.3).atanh(),
        (x.abs() + 0.1).log10(),
        x.sign(),
        (x * 7.0).trunc(),
        (x * 7.0).round(),
        rc.atan2(x, y),
        x.copysign(y),
        x.logaddexp(y),
        x.lerp(y, 0.3),
        x.div(y, rounding_mode="floor"),
        x // 0.7,
        x.logical_xor(y),
        rc.nn.elu(x),
        rc.nn.selu(x),
        rc.nn.softplus(x),
        rc.nn.mish(x),
        rc.nn.hardswish(x),
        rc.nn.logsigmoid(x),
        x.logsumexp(dim=1, keepdim=True).broadcast_to(("B", 6)),
        x.std(dim=1, keepdim=True).broadcast_to(("B", 6)),
        x.prod(dim=1, keepdim=True).broadcast_to(("B", 6)),
        rc.nn.normalize(x, dim=1),
        x.softmin(dim=1),
    ]
    out = rc.stack(parts, axis=0)
    feeds = {
        "x": rng.uniform(-2, 2, (3, 6)).astype(np.float32),
        "y": rng.uniform(-2, 2, (3, 6)).astype(np.float32),
    }
    want = rc.evaluate(out, feeds)
    got = rc.compile(out).run(feeds, backend="emulator")
    close(got, want, rtol=2e-6, atol=2e-6)


def test_running_product_and_log_sum_exp(rng):
    x = rng.uniform(0.5, 1.5, (3, 6)).astype(np.float32)
    t = torch.from_numpy(x).double()
    close(run(lambda a: a.cumprod(1), x), t.cumprod(1).numpy(), rtol=1e-6)
    close(run(lambda a: a.logcumsumexp(0), x), t.logcumsumexp(0).numpy(), rtol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(rng, reduction):
    logits = rng.standard_normal((2, 5, 3)).astype(np.float32)
    target = rng.integers(0, 5, (2, 3)).astype(np.int32)
    want = torch.nn.functional.cross_entropy(
        torch.from_numpy(logits).double(), torch.from_numpy(target).long(), reduction=reduction
    ).numpy()
    close(
        run(lambda a, b: rc.nn.cross_entropy(a, b, reduction=reduction), logits, target),
        want,
        rtol=1e-6,
        atol=1e-6,
    )
    probs = torch.softmax(torch.from_numpy(rng.standard_normal((2, 5, 3))), 1).float().numpy()
    want = torch.nn.functional.cross_entropy(
        torch.from_numpy(logits).double(), torch.from_numpy(probs).double(), reduction=reduction
    ).numpy()
    close(
        run(lambda a, b: rc.nn.cross_entropy(a, b, reduction=reduction), logits, probs),
        want,
        rtol=1e-6,
        atol=1e-6,
    )
    p = np.array([0.0, 0.3, 1.0, 0.9, 0.5], np.float32)
    y = np.array([1.0, 0.0, 1.0, 0.5, 0.25], np.float32)
    want = torch.nn.functional.binary_cross_entropy(
        torch.from_numpy(p).double(), torch.from_numpy(y).double(), reduction=reduction
    ).numpy()
    close(
        run(lambda a, b: rc.nn.binary_cross_entropy(a, b, reduction=reduction), p, y),
        want,
        rtol=1e-6,
        atol=1e-6,
    )


def test_one_hot_refuses_ids_outside_the_classes():
    ids = np.array([0, 3, 1], np.int32)
    exact(
        run(lambda a: rc.nn.one_hot(a, 4), ids),
        torch.nn.functional.one_hot(torch.from_numpy(ids).long(), 4).float().numpy(),
    )
    with pytest.raises(rc.FeedError):
        run(lambda a: rc.nn.one_hot(a, 3), ids)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(size=(8, 3), mode="nearest"),
        dict(scale_factor=2, mode="nearest"),
        dict(scale_factor=0.5, mode="nearest"),
        dict(size=(9, 4), mode="bilinear"),
        dict(size=(9, 4), mode="bilinear", align_corners=True),
        dict(scale_factor=1.7, mode="bilinear"),
        dict(scale_factor=(0.6, 2.5), mode="bilinear", align_corners=True),
    ],
)
def test_interpolate(rng, kwargs):
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    want = torch.nn.functional.interpolate(torch.from_numpy(x).double(), **kwargs).numpy()
    close(run(lambda a: rc.nn.interpolate(a, **kwargs), x), want, rtol=1e-5, atol=2e-6)


def test_interpolate_1d_linear_and_errors(rng):
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    want = torch.nn.functional.interpolate(torch.from_numpy(x).double(), size=10, mode="linear").numpy()
    close(run(lambda a: rc.nn.interpolate(a, size=10, mode="linear"), x), want, rtol=1e-5, atol=2e-6)
    with pytest.raises(ShapeError, match="exactly one of size and scale_factor"):
        rc.nn.interpolate(rc.input("x", (1, 1, 4)), size=3, scale_factor=2)
    with pytest.raises(ShapeError, match="spatial sizes must be known"):
        rc.nn.interpolate(rc.input("x", (1, 1, "T")), size=3)


def test_layer_norm_over_several_axes_and_grouped_query_attention(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    want = torch.nn.functional.layer_norm(*(torch.from_numpy(t).double() for t in (x,)), (4, 5),
                                          torch.from_numpy(w).double(), torch.from_numpy(b).double()).numpy()
    close(run(lambda a, c, d: rc.nn.layer_norm(a, (4, 5), c, d), x, w, b), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="normalized_shape"):
        rc.nn.layer_norm(rc.input("x", (2, 3)), normalized_shape=(4,))
    q = rng.standard_normal((2, 4, 3, 8)).astype(np.float32)
    k, v = (
        rng.standard_normal((2, 2, 5, 8)).astype(np.float32),
        rng.standard_normal((2, 2, 5, 8)).astype(np.float32),
    )
    for causal in (False, True):
        want = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(t).double() for t in (q, k, v)), is_causal=causal, enable_gqa=True, scale=0.3
        ).numpy()
        got = run(
            lambda a, c, d: rc.nn.scaled_dot_product_attention(
                a, c, d, is_causal=causal, enable_gqa=True, scale=0.3
            ),
            q,
            k,
            v,
        )
        close(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="4 query heads cannot share 3"):
        rc.nn.scaled_dot_product_attention(rc.input("q", (1, 4, 2, 8)), rc.input("k", (1, 3, 2, 8)),
                                           rc.input("v", (1, 3, 2, 8)), enable_gqa=True)


def test_pad_mode_errors():
    with pytest.raises(ShapeError, match="reflect padding by"):
        rc.nn.pad(rc.input("x", (1, 3)), (3, 0), "reflect")
    with pytest.raises(ShapeError, match="mode must be"):
        rc.input("x", (3,)).pad([(1, 1)], mode="mirror")


@pytest.mark.parametrize("shape,dim", [((3, 7), -1), ((5, 4, 6), 1), ((2, 8), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_are_torchs_stable_sort(rng, shape, dim, descending):
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[1], x.flat[3] = np.nan, x.flat[2]  # NaN sorts last (first descending); a tie keeps its order
    values, indices = torch.sort(torch.from_numpy(x), dim=dim, descending=descending, stable=True)
    got = run(lambda a: a.sort(dim, descending=descending)[0], x)
    np.testing.assert_array_equal(got, values.numpy())
    exact(run(lambda a: a.argsort(dim, descending=descending), x), indices.numpy().astype(np.float32))


def test_topk(rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    for k, dim, largest in ((3, 1, True), (2, 0, False), (9, 1, True), (0, 1, True)):
        values, indices = torch.topk(torch.from_numpy(x), k, dim=dim, largest=largest)
        exact(run(lambda a: a.topk(k, dim, largest)[0], x), values.numpy())
        exact(run(lambda a: a.topk(k, dim, largest)[1], x), indices.numpy().astype(np.float32))
    with pytest.raises(ShapeError, match="k = 10"):
        rc.input("x", (4, 9)).topk(10)
    with pytest.raises(ShapeError, match="symbolic length"):
        rc.input("x", ("B", 9)).sort(0)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(stride=2, padding=1, output_padding=1),
        dict(stride=1),
        dict(stride=3, padding=2, dilation=2),
        dict(stride=2, groups=2, padding=1),
    ],
)
def test_conv_transpose2d(rng, kwargs):
    groups = kwargs.get("groups", 1)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(3 * groups).astype(np.float32)
    want = torch.nn.functional.conv_transpose2d(
        *(torch.from_numpy(t).double() for t in (x, w, b)), **kwargs
    ).numpy()
    close(run(lambda a, c, d: rc.nn.conv_transpose2d(a, c, d, **kwargs), x, w, b), want, rtol=1e-5, atol=1e-5)


def test_conv_transpose_1d_3d_and_errors(rng):
    x, w = (
        rng.standard_normal((2, 4, 7)).astype(np.float32),
        rng.standard_normal((4, 3, 3)).astype(np.float32),
    )
    want = torch.nn.functional.conv_transpose1d(
        torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=2, padding=1
    ).numpy()
    close(
        run(lambda a, c: rc.nn.conv_transpose1d(a, c, stride=2, padding=1), x, w), want, rtol=1e-5, atol=1e-5
    )
    x, w = (
        rng.standard_normal((1, 2, 3, 3, 2)).astype(np.float32),
        rng.standard_normal((2, 2, 2, 2, 2)).astype(np.float32),
    )
    want = torch.nn.functional.conv_transpose3d(
        torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=2
    ).numpy()
    close(run(lambda a, c: rc.nn.conv_transpose3d(a, c, stride=2), x, w), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match="conv_transpose2d weight"):
        rc.nn.conv_transpose2d(rc.input("x", (1, 2, 3, 3)), rc.input("w", (2, 2, 3)))
    with pytest.raises(ShapeError, match="spatial sizes must be known"):
        rc.nn.conv_transpose2d(rc.input("x", (1, 2, "H", 3)), rc.input("w", (2, 2, 3, 3)))


def test_unfold_index_select_and_integer_tensor_indexing(rng):
    x = rng.standard_normal((5, 4, 6)).astype(np.float32)
    t = torch.from_numpy(x)
    for args in ((2, 3, 2), (0, 2, 1), (1, 4, 3), (2, 6, 1)):
        exact(run(lambda a: a.unfold(*args), x), t.unfold(*args).numpy())
    ids = np.array([[4, 0], [2, 2]], np.int32)
    exact(run(lambda a, i: a[i], x, ids), t[torch.from_numpy(ids).long()].numpy())
    picks = np.array([3, 0, 1], np.int32)
    for d in (1, 2):
        exact(
            run(lambda a, i: a.index_select(d, i), x, picks),
            torch.index_select(t, d, torch.from_numpy(picks).long()).numpy(),
        )
    with pytest.raises(rc.FeedError):  # an id beyond the axis is refused, never read
        run(lambda a, i: a.index_select(1, i), x, np.array([4], np.int32))
    with pytest.raises(ShapeError, match="unfold"):
        rc.input("x", (5,)).unfold(0, 6, 1)
    with pytest.raises(ShapeError, match="integer ids"):
        rc.input("x", (5,)).index_select(0, rc.input("f", (2,)))


def test_misused_functions_say_what_they_expected(rng):
    x4 = rc.input("x", (1, 1, 4, 4))
    for call, says in (
        (lambda: rc.nn.interpolate(x4, scale_factor=(2,)), "one size or scale per spatial axis"),
        (lambda: rc.nn.normalize(x4, p=0), "p must be a positive number"),
        (lambda: rc.nn.pad(x4, 1), "ints in pairs"),
        (lambda: rc.nn.layer_norm(x4, normalized_shape=(3,)), "normalized_shape"),
        (lambda: rc.einsum(3, x4), "equation must be a string"),
        (lambda: rc.linspace(0.0, 1.0, 2.5), "steps must be a non-negative int"),
        (lambda: x4.div(2.0, rounding_mode="round"), "rounding_mode"),
    ):
        with pytest.raises(ShapeError, match=says):
            call()
    x = rng.standard_normal((2, 3)).astype(np.float32)  # an int normalized_shape, as PyTorch takes it
    close(run(lambda a: rc.nn.layer_norm(a, normalized_shape=3), x),
          torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (3,)).numpy(), rtol=1e-5, atol=1e-6)


@needs_torch
def test_indexing_with_one_list_of_ints_matches_torch(rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    t = torch.from_numpy(a)
    for index in (
        [0, 2, 2],
        (slice(None), [3, 0]),
        (1, [3, 2, 0]),
        (Ellipsis, [1, 3]),
        (slice(None), [-1]),
        (None, [2, 0], 1),
        (slice(0, 2), slice(None), np.array([0, 0, 4])),
        (Ellipsis, [3, 1], 2),
        [0, 1, 2],
    ):
        exact(run(lambda x: x[index], a), t[index].numpy())
    x = rc.input("x", (3, 4, 5))
    with pytest.raises(ShapeError, match="index 4 is out of range for axis 1"):
        x[:, [4]]
    with pytest.raises(ShapeError, match="one list or tensor of ints at a time"):
        x[[0, 1], [0, 1]]
    y = rc.input("y", ("T", 5))
    with pytest.raises(rc.BindingError, match="out of range"):  # a symbolic axis too short at run time
        rc.evaluate(y[[5, 0]], {"y": np.ones((3, 5), np.float32)})
