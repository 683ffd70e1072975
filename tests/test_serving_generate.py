"""The engine generates transformers' tokens: greedy decoding of random-weight GPT-2 and LLaMA (GQA)
models gives exactly `generate(do_sample=False)`'s ids, on the reference and the emulator, with
prompts of different lengths in one batch and a prompt longer than the prefill chunk; every step's
logits match torch's full-sequence forward; two compiles serve a whole generation; a poisoned pool
cannot leak into a sequence; stop tokens and the stream behave."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from refcomp.errors import RefcompError  # noqa: E402
from refcomp.serving.engine import Engine, EngineError  # noqa: E402
from refcomp.serving.models import from_transformers  # noqa: E402

PROMPTS = [[5, 7, 9, 11, 13], [1, 2, 3], list(range(20, 41))]  # the last spans three prefill chunks of 8
NEW = 32


def hf_model(family: str):
    """A small random model; a wide initialiser so that tokens vary (the default's copy the prompt)."""
    torch.manual_seed(0)
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=128,
                                      eos_token_id=None, bos_token_id=None, initializer_range=0.3)
        return cfg, transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=128,
        max_position_embeddings=128,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        initializer_range=0.3,
    )
    return cfg, transformers.LlamaForCausalLM(cfg).eval()


def hf_greedy(hf, prompt, new=NEW) -> list:
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    return out[0, len(prompt):].tolist()


def _family(name):
    cfg, hf = hf_model(name)
    return name, hf, from_transformers(cfg, hf.state_dict()), [hf_greedy(hf, p) for p in PROMPTS]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def family(request):
    return _family(request.param)


@pytest.fixture(scope="module", params=["gpt2", pytest.param("llama", marks=pytest.mark.slow)])
def emulated(request):
    """One traced generation on the emulator per family (its compiles are most of this file's time:
    LLaMA's runs under -m slow), shared by the tests below: (family, engine, tokens, trace)."""
    family = _family(request.param)
    name, hf, model, want = family
    engine = Engine(model, pages=64, page_size=4, backend="emulator", prefill_chunk=8)
    engine.trace = []
    got = engine.generate(PROMPTS, NEW)
    trace, engine.trace = engine.trace, None
    return family, engine, got, trace


def test_greedy_tokens_match_transformers_on_the_emulator(emulated):
    (_, _, _, want), _, got, _ = emulated
    assert got == want


def test_greedy_tokens_match_transformers_on_the_reference(family):
    _, _, model, want = family
    assert (
        Engine(model, pages=64, page_size=4, backend="numpy", prefill_chunk=8).generate(PROMPTS, NEW) == want
    )


def test_a_generation_compiles_twice(emulated):
    _, engine, got, _ = emulated
    assert engine.compiles == 2 and engine.stats["decode_steps"] == NEW - 1
    assert engine.generate([PROMPTS[1] + got[1][:7]], 5) == [got[1][7:12]]  # a longer context, no new compile
    assert engine.compiles == 2


def test_every_steps_logits_match_the_full_forward(emulated):
    """Each step's logits are those torch's full forward gives at the sequence's last position."""
    (_, hf, _, _), _, got, trace = emulated
    sequences = [p + g for p, g in zip(PROMPTS, got)]
    with torch.no_grad():
        full = [hf(torch.tensor([s])).logits[0].numpy() for s in sequences]
    done = [0] * len(PROMPTS)  # tokens of each sequence whose logits were checked
    checked = 0
    for kind, rows, logits in trace:
        for r, i in enumerate(rows):
            if kind == "prefill" and done[i] == 0:  # chunks before the last give the chunk's last position
                done[i] = min(len(PROMPTS[i]), 8)
            elif kind == "prefill":
                done[i] = min(len(PROMPTS[i]), done[i] + 8)
            else:
                done[i] += 1
            np.testing.assert_allclose(logits[r], full[i][done[i] - 1], rtol=1e-4, atol=2e-4)
            checked += 1
    assert checked >= len(PROMPTS) * NEW


def test_a_poisoned_pool_changes_nothing(family):
    """Every slot starts NaN and page 0 (the block tables' padding) belongs to another sequence: the
    masks must select, never add, or the NaN would reach the tokens."""
    _, _, model, want = family
    engine = Engine(model, pages=64, page_size=4, backend="numpy", prefill_chunk=8)
    engine.pool.allocate("other", 4)  # takes page 0
    for arrays in (engine.pool.k, engine.pool.v):
        for a in arrays:
            a[...] = np.nan
    assert engine.generate(PROMPTS[:2], 12) == [w[:12] for w in want[:2]]


def test_stop_tokens_eos_and_the_stream(family):
    name, _, model, want = family
    engine = Engine(model, pages=64, page_size=4, backend="numpy", prefill_chunk=8)
    stop = want[0][4]
    first = want[0].index(stop)
    got = engine.generate(PROMPTS[:2], 10, stop_token_ids=[stop])
    assert got[0] == want[0][:first + 1]
    assert got[1] == (want[1][:want[1].index(stop) + 1] if stop in want[1][:10] else want[1][:10])
    engine.model.spec = dataclasses.replace(model.spec, eos_token_id=(stop,))
    try:
        assert engine.generate(PROMPTS[:1], 10)[0] == want[0][:first + 1]
        assert engine.generate(PROMPTS[:1], 10, ignore_eos=True)[0] == want[0][:10]
        events = list(engine.stream(PROMPTS[:2], 6, ignore_eos=True))
    finally:
        engine.model.spec = model.spec
    assert [t for i, t in events if i == 0] == want[0][:6] and [t for i, t in events if i == 1] == want[1][:6]
    assert [i for i, _ in events[:2]] == [0, 1] or sorted(i for i, _ in events[:2]) == [0, 1]
    assert engine.pool.sequences() == []  # every page back


def test_pages_outside_the_pool_and_bad_requests_are_refused(family):
    _, _, model, _ = family
    engine = Engine(model, pages=8, page_size=4, backend="numpy", prefill_chunk=8)
    with pytest.raises(RefcompError, match="full"):
        engine.generate([list(range(30))], 8)
    assert engine.pool.sequences() == []
    step = engine.program("decode")
    s = model.spec
    feeds = {
        **model.feeds(),
        **engine.pool.feeds(),
        "ids": np.zeros((1, 1), np.int32),
        "positions": np.zeros((1, 1), np.int32),
        "cached": np.zeros(1, np.float32),
        "lengths": np.ones(1, np.float32),
        "block_table": np.array([[99]], np.int32),
        "slots": np.zeros((1, 1), np.int32),
        "penalty": np.ones(1, np.float32),
        "seen": np.zeros((1, s.vocab), np.float32),
    }
    with pytest.raises(RefcompError, match="99"):
        step(feeds)
    for bad, match in (
        ([], "non-empty"),
        ([[1, 999]], "token ids"),
        ([[1]] * 300, "batch"),
        ([["a"]], "token ids"),
        ([1, 2, 3], "token ids"),  # a flat list is no list of prompts
        ([[1.5]], "token ids"),  # ids are ints, not numbers rounded down
    ):
        with pytest.raises(EngineError, match=match):
            engine.generate(bad, 2)
    with pytest.raises(EngineError, match="positions"):
        engine.generate([[1] * 120], 20)
    with pytest.raises(EngineError, match="Sampling"):
        engine.generate([[1]], 2, sampling={"temperature": 1.0})
    with pytest.raises(EngineError, match="stop_token_ids"):
        engine.generate([[1]], 2, stop_token_ids=["x"])
    for kwargs, match in (({"page_size": 0}, "page_size"), ({"pages": "8"}, "pages"),
                          ({"backend": "tpu"}, "unknown backend")):
        with pytest.raises(EngineError, match=match):  # before anything divides by or runs on them
            Engine(model, **{"pages": 8, "page_size": 4, **kwargs})
