"""Issue 28: calls whose name matches PyTorch's behave as PyTorch's (or raise a RefcompError naming the
difference). Regression tests for answers that once differed silently, each against torch on the CPU."""
import numpy as np

import refcomp as rc
from api_helpers import close, exact, needs_torch, run, torch

pytestmark = needs_torch
F = torch.nn.functional if torch is not None else None


def test_attention_reads_a_boolean_mask_as_torch_does(rng):
    """A mask built by a comparison is PyTorch's bool mask: True takes part, False is blocked (it was
    added as 0/1)."""
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8)))
    keep = rng.random((4, 6)).astype(np.float32)
    keep[2] = 0.9  # a row kept whole; and one blocked whole (PyTorch gives it zeros)
    keep[3] = 0.0
    want = F.scaled_dot_product_attention(*(torch.from_numpy(t).double() for t in (q, k, v)),
                                          attn_mask=torch.from_numpy(keep > 0.5)).numpy()
    got = run(
        lambda a, b, c, m: rc.nn.scaled_dot_product_attention(a, b, c, attn_mask=m > 0.5), q, k, v, keep
    )
    close(got, want, rtol=1e-5, atol=1e-6)


def test_max_and_min_with_a_dim_return_values_and_indices(rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    x[1, 1] = x[1, 3] = 9.0  # ties: the first index, as PyTorch
    x[2, 4] = np.nan
    t = torch.from_numpy(x)
    for name in ("max", "min"):
        values, indices = getattr(rc.input("x", (3, 5)), name)(dim=-1)
        got = rc.evaluate([values, indices], {"x": x})
        want = getattr(t, name)(dim=-1)
        exact(got[0], want.values.numpy())
        exact(got[1], want.indices.numpy().astype(np.float32))
        pair = getattr(rc.input("x", (3, 5)), name)(1, True)
        assert pair.values.shape == (3, 1) and pair.indices.shape == (3, 1)
    exact(run(lambda a: a.max(), x), t.max().numpy())


def test_var_and_std_with_a_positional_dim_use_torchs_correction(rng):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    t = torch.from_numpy(x).double()
    close(run(lambda a: a.var(-1), x), t.var(-1).numpy(), rtol=1e-6)
    close(run(lambda a: a.std(-1), x), t.std(-1).numpy(), rtol=1e-6)
    close(run(lambda a: a.var(), x), t.var().numpy(), rtol=1e-6)


def test_gelu_defaults_to_the_exact_form(rng):
    x = np.concatenate(
        [rng.uniform(-6, 6, 200).astype(np.float32), np.float32([0.0, -0.0, np.inf, -np.inf, np.nan])]
    )
    close(run(lambda a: a.gelu(), x), F.gelu(torch.from_numpy(x).double()).numpy(), rtol=2e-6, atol=1e-7)


def test_booleans_are_flagged_where_pytorch_types_them_bool(rng):
    """What PyTorch would type torch.bool is a BoolTensor (views too); arithmetic and .float() are not, so
    `attn_mask` reads each the way PyTorch reads the same call."""
    x = rc.input("x", (4, 6))
    flagged = [
        x > 0,
        x.eq(1.0),
        x.isnan(),
        (x > 0) & (x < 1),
        ~(x > 0),
        x.any(1),
        (x > 0).T,
        (x > 0)[1:],
        x.bool(),
        rc.ones(4, 6, dtype=rc.bool).tril(),
        rc.full((2,), True),
        rc.zeros_like(x > 0),
        rc.cat([x > 0, x < 1]),
        (x > 0).contiguous(),
        rc.where(x > 1, x > 0, x < 0),
        (x > 0).masked_fill(x < 0, 1),
        (x > 0).roll(1, 0),
    ]
    plain = [
        (x > 0) * 1.0,
        (x > 0).float(),
        x.sum(),
        rc.where(x > 0, x, 0.0),
        rc.ones(4, 6).tril(),
        rc.eye(3),
        rc.cat([x > 0, x]),
        (x > 0).masked_fill(x < 0, 0.5) * 1.0,
    ]
    assert all(isinstance(t, rc.BoolTensor) for t in flagged), [
        t for t in flagged if not isinstance(t, rc.BoolTensor)
    ]
    assert not any(isinstance(t, rc.BoolTensor) for t in plain), [
        t for t in plain if isinstance(t, rc.BoolTensor)
    ]
    q, k = (
        rng.standard_normal((2, 4, 8)).astype(np.float32),
        rng.standard_normal((2, 6, 8)).astype(np.float32),
    )
    causal = torch.ones(4, 6, dtype=torch.bool).tril()
    for mask, theirs in (
        (rc.ones(4, 6, dtype=rc.bool).tril(), causal),
        (rc.ones(4, 6).tril(), causal.double()),
    ):
        got = run(lambda a, b: rc.nn.scaled_dot_product_attention(a, b, b, mask), q, k)
        want = F.scaled_dot_product_attention(torch.from_numpy(q).double(), torch.from_numpy(k).double(),
                                              torch.from_numpy(k).double(), theirs)
        close(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_shapes_stay_symbolic_through_pytorchs_questions():
    x = rc.input("x", ("B", "T", 4))
    assert x.size() == x.shape and x.size(-1) == 4 and str(x.numel()) == "4*B*T" and x.dim() == 3
    t = x.shape[1]
    out = rc.evaluate([rc.arange(0, t), rc.arange(t), x.split([1, 3], -1)[1], x.new_zeros(2, t).sum(1)],
                      {"x": np.ones((2, 5, 4), np.float32)})
    exact(out[0], np.arange(5, dtype=np.float32))
    exact(out[1], np.arange(5, dtype=np.float32))
    assert out[2].shape == (2, 5, 3) and out[3].shape == (2,)
