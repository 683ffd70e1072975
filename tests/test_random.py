"""Random tensors (issue 28): bit-identical draws on every backend, the distributions torch's calls have,
and the generator's statistical battery. Oracles: scipy.stats' distributions, torch for dtypes, ranges
and dropout's scaling, NumPy's log and cos for the portable functions."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from scipy import stats

import refcomp as rc
from refcomp.ops import philox
from refcomp.ops.portable_math import cos_turns, log_unit

ALPHA = 1e-3  # a fixed seed's p-value below this fails (each test draws once, at one seed)


def bits_equal(a, b) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def draw(tensor, feeds=None):
    return rc.evaluate(tensor, feeds or {})


# --- the same bits everywhere --------------------------------------------------------------------
def test_every_draw_is_bit_identical_on_the_emulator_with_a_seed_fed_at_run_time():
    seed = rc.input("seed", ())
    x = rc.input("x", ("B", 6))
    w = rc.input("w", ("B", 9))
    g = rc.Generator(seed)
    outputs = [
        rc.rand("B", 5, generator=g),
        rc.randn("B", 5, generator=g),
        rc.randint(-4, 9, ("B", 5), generator=g),
        rc.nn.dropout(x, 0.3, generator=g),
        rc.bernoulli(rc.full(("B", 5), 0.3), generator=g),
        w.multinomial(3, generator=g),
        w.multinomial(4, replacement=True, generator=g),
    ]
    prog = rc.compile(outputs)
    rng = np.random.default_rng(0)
    seen = []
    for b, s in ((3, 1), (5, 2), (3, 2**24 - 1)):
        feeds = {"seed": np.float32(s), "x": rng.standard_normal((b, 6)).astype(np.float32),
                 "w": rng.uniform(0.1, 1.0, (b, 9)).astype(np.float32)}
        want = rc.evaluate(outputs, feeds)
        got = prog.run(feeds, backend="emulator")
        for k, (a, e) in enumerate(zip(got, want)):
            assert bits_equal(a, e), f"output {k} at seed {s}"
        seen.append(want[0][:3])
    assert not np.array_equal(seen[0], seen[1][:3]), "another seed draws other values"


def test_a_generator_with_an_int_seed_draws_what_a_seed_tensor_of_that_value_draws():
    fed = rc.randn(7, generator=rc.Generator(rc.input("s", ())))
    assert bits_equal(draw(fed, {"s": np.float32(1234)}), draw(rc.randn(7, generator=rc.Generator(1234))))


def test_draws_repeat_for_a_seed_and_advance_per_call():
    g = rc.Generator(9)
    first, second = draw(rc.rand(100, generator=g)), draw(rc.rand(100, generator=g))
    assert not np.array_equal(first, second)
    assert bits_equal(first, draw(rc.rand(100, generator=rc.Generator(9))))
    rc.manual_seed(3)
    a = draw(rc.rand(10))
    rc.manual_seed(3)
    assert bits_equal(a, draw(rc.rand(10)))
    assert bits_equal(a, draw(rc.rand(10, generator=rc.Generator(3))))


def test_nearby_large_seeds_are_unrelated():
    a = draw(rc.rand(4096, generator=rc.Generator(2**40)))
    b = draw(rc.rand(4096, generator=rc.Generator(2**40 + 1)))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.06


# --- distributions -------------------------------------------------------------------------------
def test_rand_is_uniform_on_its_grid():
    u = draw(rc.rand(200_000, generator=rc.Generator(11))).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert np.all(u * 2**24 == np.floor(u * 2**24))
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    assert abs(u.mean() - 0.5) < 4 * math.sqrt(1 / 12 / len(u))
    assert stats.chisquare(np.histogram(u, 256, (0, 1))[0]).pvalue > ALPHA


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_rand_stays_below_one_as_torch_keeps_it(dtype):
    t = rc.rand(50_000, generator=rc.Generator(2), dtype=dtype)
    want = getattr(torch, dtype)
    assert torch.rand(3, dtype=want).dtype == want and t.dtype == dtype
    u = draw(t).astype(np.float64)
    assert u.max() < 1.0 and u.min() >= 0.0
    assert stats.kstest(u, "uniform").pvalue > ALPHA or len(np.unique(u)) <= 2**11  # a grid of 2**11 or 2**8


def test_randn_is_standard_normal():
    z = draw(rc.randn(200_000, generator=rc.Generator(5))).astype(np.float64)
    assert stats.kstest(z, "norm").pvalue > ALPHA
    n = len(z)
    assert abs(z.mean()) < 4 / math.sqrt(n) and abs(z.var() - 1) < 4 * math.sqrt(2 / n)
    assert abs(stats.skew(z)) < 4 * math.sqrt(6 / n) and abs(stats.kurtosis(z)) < 4 * math.sqrt(24 / n)
    tail = np.mean(np.abs(z) > 3)
    assert abs(tail - 2 * stats.norm.sf(3)) < 5 * math.sqrt(2 * stats.norm.sf(3) / n)


def test_randint_forms_ranges_and_uniformity_follow_torch():
    assert torch.randint(5, (2,)).max() < 5 and torch.randint(-3, 4, (2,)).min() >= -3
    a = draw(rc.randint(5, (40_000,), generator=rc.Generator(1)))
    b = draw(rc.randint(-3, 4, size=(40_000,), generator=rc.Generator(1)))
    for values, low, high in ((a, 0, 5), (b, -3, 4)):
        assert set(np.unique(values)) == set(range(low, high))
        counts = np.array([np.sum(values == k) for k in range(low, high)])
        assert stats.chisquare(counts).pvalue > ALPHA
    c = draw(rc.randint_like(rc.zeros(3, 4), 10, generator=rc.Generator(2)))
    assert c.shape == (3, 4) and np.all((c >= 0) & (c < 10) & (c == np.round(c)))


def test_normal_broadcasts_tensor_means_and_stds_as_torch():
    mean, std = rc.constant(3.0).reshape(1, 1).broadcast_to((1, 50_000)), rc.full((2, 1), 2.0)
    out = rc.normal(mean, std, generator=rc.Generator(4))
    assert tuple(out.shape) == tuple(
        torch.normal(torch.full((1, 50_000), 3.0), torch.full((2, 1), 2.0)).shape
    )
    z = draw(out)
    assert stats.kstest(((z - 3.0) / 2.0).ravel(), "norm").pvalue > ALPHA
    fixed = draw(rc.normal(1.0, 0.5, (30_000,), generator=rc.Generator(4)))
    assert stats.kstest((fixed - 1.0) / 0.5, "norm").pvalue > ALPHA


def test_bernoulli_and_dropout_keep_what_torch_keeps_and_scale_as_torch_scales():
    p = draw(rc.bernoulli(rc.full((100_000,), 0.3), generator=rc.Generator(8)))
    assert set(np.unique(p)) == {0.0, 1.0} and abs(p.mean() - 0.3) < 4 * math.sqrt(0.21 / len(p))
    x = np.random.default_rng(1).standard_normal(50_000).astype(np.float32)
    fed = rc.input("x", x.shape)
    for drop in (0.1, 0.3, 0.5):
        out = draw(rc.nn.dropout(fed, drop, generator=rc.Generator(8)), {"x": x})
        kept = out != 0
        assert abs(kept.mean() - (1 - drop)) < 4 * math.sqrt(drop * (1 - drop) / len(x))
        scaled = (
            torch.from_numpy(x) * (torch.ones(1) / (1 - drop))
        ).numpy()  # torch's mask is 1/(1-p) in float32
        assert bits_equal(out[kept], scaled[kept])
    assert bits_equal(draw(rc.nn.dropout(fed, 0.5, training=False), {"x": x}), x)


def test_attention_dropout_drops_weights_as_torch_does():
    feeds = {"q": np.random.default_rng(2).standard_normal((1, 4, 8)).astype(np.float32)}
    q = rc.input("q", (1, 4, 8))
    dropped = draw(
        rc.nn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, generator=rc.Generator(1)), feeds
    )
    # torch's math path: softmax weights, dropout of the weights, then @ v; the mask is rc's own draw
    weights = torch.softmax(torch.from_numpy(feeds["q"]) @ torch.from_numpy(feeds["q"]).transpose(-2, -1)
                            / math.sqrt(8), -1)
    mask = draw(rc.nn.dropout(rc.full((1, 4, 4), 1.0), 0.5, generator=rc.Generator(1))) != 0
    want = (weights * torch.from_numpy(mask) * 2.0) @ torch.from_numpy(feeds["q"])
    np.testing.assert_allclose(dropped, want.numpy(), rtol=1e-5, atol=1e-6)


def test_multinomial_samples_by_weight_with_and_without_replacement():
    weights = np.array([1.0, 0.0, 2.0, 5.0, 2.0], np.float32)
    feeds = {"w": np.tile(weights, (20_000, 1))}
    w = rc.input("w", feeds["w"].shape)
    drawn = draw(w.multinomial(1, generator=rc.Generator(3)), feeds)[:, 0]
    counts = np.array([np.sum(drawn == k) for k in range(5)])
    assert counts[1] == 0
    expected = weights / weights.sum() * len(drawn)
    keep = expected > 0
    assert stats.chisquare(counts[keep], expected[keep]).pvalue > ALPHA
    distinct = draw(w.multinomial(4, generator=rc.Generator(3)), feeds)
    assert all(len(set(r)) == 4 and 1 not in r for r in distinct[:500].tolist())
    again = draw(rc.multinomial(w, 6, replacement=True, generator=rc.Generator(3)), feeds)
    counts = np.array([np.sum(again == k) for k in range(5)])
    assert counts[1] == 0 and stats.chisquare(counts[keep], expected[keep] * 6).pvalue > ALPHA
    assert torch.multinomial(torch.from_numpy(weights), 2).shape == (2,)


# --- the generator's battery ---------------------------------------------------------------------
def _bits(count: int, seed: int = 123, stream: int = 0):
    g = rc.Generator(seed)
    g.draws = stream
    first, second = philox.random_bits((count,), g)
    return [draw(t).astype(np.int64) for t in (first, second)]


def test_neighbouring_elements_streams_and_keys_are_independent():
    n = 1 << 17
    a, b = _bits(n)
    other_stream, _ = _bits(n, stream=1)
    other_key, _ = _bits(n, seed=124)
    for x, y in ((a[:-1], a[1:]), (a, b), (a, other_stream), (a, other_key)):
        h = np.histogram2d(x, y, 32, [[0, 2**24], [0, 2**24]])[0]
        assert stats.chisquare(h.ravel()).pvalue > ALPHA
        assert abs(np.corrcoef(x, y)[0, 1]) < 5 / math.sqrt(len(x))


def test_one_flipped_counter_bit_flips_each_output_bit_half_the_time():
    n = 1 << 14
    counter = rc.input("i", (n,))
    hashed = rc.compile(philox.philox(counter, 5.0, (77.0, 901.0))[0])
    index = (np.arange(n, dtype=np.int64) * 7919) % (1 << 24)
    def run(positions):
        return np.asarray(hashed.run({"i": positions.astype(np.float32)}, backend="numpy")).astype(np.int64)
    base = run(index)
    for bit in range(24):
        flipped = np.bitwise_xor(base, run(np.bitwise_xor(index, 1 << bit)))
        rates = np.array([np.mean((flipped >> k) & 1) for k in range(24)])
        assert np.all(np.abs(rates - 0.5) < 0.035), f"counter bit {bit}: {rates.round(3)}"


def test_portable_log_and_cos_are_within_a_few_ulps_of_numpy():
    u = (np.arange(1, 1 << 16, dtype=np.float64) * 255.0 + 1.0) * 2.0**-24
    u = np.concatenate([u[u <= 1.0], [2.0**-24, 2.0**-25, 0.5, 1.0]]).astype(np.float32)
    got = draw(log_unit(rc.input("u", u.shape)), {"u": u}).astype(np.float64)
    want = np.log(u.astype(np.float64))
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30) * (np.abs(want) > 1e-3)) < 4e-7
    assert np.max(np.abs(got - want)) < 2e-7 * 17
    t = (np.arange(0, 1 << 24, 251, dtype=np.float64) * 2.0**-24).astype(np.float32)
    got = draw(cos_turns(rc.input("t", t.shape)), {"t": t}).astype(np.float64)
    assert np.max(np.abs(got - np.cos(2 * np.pi * t.astype(np.float64)))) < 3e-7


# --- refusals ------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, words", [
    (lambda: rc.randint(5, 5, (3,)), "empty"),
    (lambda: rc.randint(0, 2**25, (3,)), re.escape("2**24")),
    (lambda: rc.rand(5000, 5000), "16,777,216"),
    (lambda: rc.rand(3, dtype="int64"), "int64"),
    (lambda: rc.rand(3, dtype="int32"), "not a floating type"),
    (lambda: rc.rand(3, generator=5), "rc.Generator"),
    (lambda: rc.Generator(2.5), "seed must be an int"),
    (lambda: rc.input("w", (4,)).multinomial(5), "without replacement from 4"),
    (lambda: rc.normal(0.0, -1.0, (3,)), "std must be >= 0"),
])
def test_bad_draws_are_refused_with_the_reason(make, words):
    with pytest.raises(rc.RefcompError, match=words):
        make()


def test_a_draw_past_the_counter_is_refused_at_the_binding():
    out = rc.rand("B", 4096, generator=rc.Generator(1))
    with pytest.raises(rc.BindingError, match=re.escape("2**24")):
        rc.compile(out).run({}, dims={"B": 4097}, backend="numpy")
