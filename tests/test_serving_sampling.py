"""Sampling kernels against transformers' own logits processors (repetition penalty, temperature,
top-k, top-p in generate's order): the kept tokens and their probabilities, draws whose frequencies
follow them, greedy rows, the same draw on the reference and the emulator for a seed, and the
engine's seeded generations."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp.serving.sampling import Sampling, SamplingError, sampling_feeds, sampling_graph

torch = pytest.importorskip("torch")
lp = pytest.importorskip("transformers.generation.logits_process")


def oracle(logits, seen, s: Sampling):
    """transformers' processed distribution for one row (torch, float32)."""
    x = torch.tensor(logits[None])
    ids = torch.tensor(np.nonzero(seen)[0][None])
    if s.repetition_penalty != 1:
        x = lp.RepetitionPenaltyLogitsProcessor(s.repetition_penalty)(ids, x)
    x = lp.TemperatureLogitsWarper(s.temperature)(ids, x)
    if s.top_k:
        x = lp.TopKLogitsWarper(s.top_k)(ids, x)
    if s.top_p < 1:
        x = lp.TopPLogitsWarper(s.top_p)(ids, x)
    return torch.softmax(x, -1)[0].numpy()


def run(settings, logits, seen, step=0, backend="numpy", program=None):
    feeds = {"logits": logits, **sampling_feeds(settings, seen, step)}
    if program is not None:
        return program.run(feeds, backend=backend)
    return rc.evaluate(sampling_graph(rc.input("logits", ("B", logits.shape[1]))), feeds)


SETTINGS = [Sampling(0.7, 5, 1.0, 1.3), Sampling(1.2, 0, 0.8), Sampling(0.9, 10, 0.6, 1.5), Sampling(1.0, 1),
            Sampling(1.0, 0, 0.01), Sampling(0.05), Sampling(2.0, 32, 0.95, 0.5)]


@pytest.mark.parametrize("vocab", [32, 100])
def test_kept_tokens_and_probabilities_are_transformers(vocab, rng):
    logits = (rng.normal(size=(len(SETTINGS), vocab)) * 2).astype(np.float32)
    seen = (rng.random(logits.shape) < 0.2).astype(np.float32)
    out = run(SETTINGS, logits, seen)
    for i, s in enumerate(SETTINGS):
        want = oracle(logits[i], seen[i], s)
        if vocab > 64 and not s.top_k and s.top_p == 1:
            continue  # plain temperature sampling races over the whole row; `probs` are the candidates'
        mine = np.zeros(vocab)
        mine[out["candidates"][i].astype(int)] = out["probs"][i]
        np.testing.assert_allclose(mine / mine.sum(), want, atol=1e-6, err_msg=str(s))
        assert mine[int(out["token"][i])] > 0  # the draw is one of the kept tokens


def test_greedy_rows_take_the_penalised_argmax(rng):
    logits = rng.normal(size=(4, 40)).astype(np.float32)
    logits[:, 7] = 5.0
    seen = np.zeros_like(logits)
    seen[:2, 7] = 1.0
    out = run([Sampling(0.0, repetition_penalty=10.0)] * 2 + [Sampling()] * 2, logits, seen)
    penalised = logits.copy()
    penalised[:2, 7] = 0.5  # 5 / 10: only the seen token is penalised
    assert out["token"].astype(int).tolist() == np.argmax(penalised, -1).tolist()
    assert out["token"][2:].tolist() == [7, 7]


def test_draws_follow_the_probabilities(rng):
    """3,000 rows of one distribution in one draw: the counts' chi-square stays in its 99.9% range."""
    row = np.array([1.0, 0.5, 0.0, -0.5, -1.0, 2.0], np.float32)
    s = Sampling(0.8, 4, 0.97)
    n = 3000
    out = run([s] * n, np.tile(row, (n, 1)), np.zeros((n, 6), np.float32), step=3)
    p = oracle(row, np.zeros(6), s)
    counts = np.bincount(out["token"].astype(int), minlength=6)
    assert set(np.nonzero(counts)[0]) <= set(np.nonzero(p)[0])
    kept = p > 0
    chi2 = (((counts[kept] - n * p[kept]) ** 2) / (n * p[kept])).sum()
    assert chi2 < 16.3  # 99.9% quantile with 3 degrees of freedom


def test_a_seed_draws_the_same_on_the_reference_and_the_emulator(rng):
    vocab = 16
    program = rc.compile(sampling_graph(rc.input("logits", ("B", vocab))), dims_hint={"B": 4})
    logits = rng.normal(size=(5, vocab)).astype(np.float32)
    seen = np.zeros_like(logits)
    settings = [
        Sampling(1.0, seed=11),
        Sampling(1.5, 8, seed=11),
        Sampling(0.9, 0, 0.9),
        Sampling(),
        Sampling(3.0),
    ]
    draws = []
    for step in range(3):
        ref = run(settings, logits, seen, step)
        emu = run(settings, logits, seen, step, backend="emulator", program=program)
        np.testing.assert_array_equal(ref["token"], emu["token"])
        draws.append(tuple(ref["token"]))
    assert len(set(draws)) > 1  # each step's seed draws afresh


def test_settings_out_of_range_are_refused():
    for bad in (Sampling(-1.0), Sampling(1.0, 65), Sampling(1.0, 0, 0.0), Sampling(1.0, 0, 1.5),
                Sampling(repetition_penalty=0.0), Sampling(seed=-1), Sampling(float("nan"))):
        with pytest.raises(SamplingError):
            bad.check(64)


@pytest.mark.slow
def test_the_engine_samples_reproducibly():
    transformers = pytest.importorskip("transformers")
    from refcomp.serving.engine import Engine
    from refcomp.serving.models import from_transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=48, n_positions=64, eos_token_id=None, bos_token_id=None
    )
    model = from_transformers(cfg, transformers.GPT2LMHeadModel(cfg).state_dict())
    engine = Engine(model, pages=16, page_size=4, backend="numpy")
    prompts = [[1, 2, 3], [4, 5]]
    a = engine.generate(prompts, 5, Sampling(1.0, 20, 0.9, 1.2, seed=5))
    b = engine.generate(prompts, 5, Sampling(1.0, 20, 0.9, 1.2, seed=5))
    c = engine.generate(prompts, 5, Sampling(1.0, 20, 0.9, 1.2, seed=6))
    assert a == b and a != c and all(len(x) == 5 for x in a)
    mixed = engine.generate(prompts, 5, [Sampling(), Sampling(1.0, seed=5)])
    assert mixed[0] == engine.generate(prompts[:1], 5)[0]  # a greedy row stays greedy beside a sampled one
