"""Choosing the next token as kernels: greedy, temperature, top-k, top-p and the repetition penalty,
in transformers' order (penalty, temperature, top-k, top-p).

Greedy choice (the penalty, then argmax) is cheap and part of both step programs (`greedy_graph`).
Sampling is its own small program over the step's logits (`sampling_graph`), compiled once by the
engine the first time a sequence samples: its ranking and random draws are most of the kernels and
of the compile time, and one program serves the logits of prefill and decode alike. Every
parameter is an input per sequence, fed at each step, so one compiled program serves any mix
of settings: `temperature` (0 picks greedily), `top_k` (0: off), `top_p` (1: off), `penalty` (1: off)
over `seen` (B, vocab), 1 where a token occurred in the sequence so far (prompt included), and a
`seed` for the draw: a `Generator` seeded by a fed tensor, so a draw is the same on the reference,
the emulator and CUDA, and a new seed each step draws afresh without recompiling.

The candidates are the row's 64 largest logits (the whole row of a smaller vocabulary), found by
`topk`. Top-k and top-p choose among them, with probabilities normalised
over the whole row (top-k off) or the top k (on), so the kept set and its probabilities are
transformers'; only a nucleus wider than the candidates is cut at their number. Plain temperature
sampling (top-k and top-p off) races over the whole row instead, so it draws from the exact softmax.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import RefcompError
from ..ops.core import input as rc_input, iota
from ..ops.elementwise import where
from ..ops.philox import Generator

CANDIDATES = 64  # the most likely tokens that top-k and top-p choose among


class SamplingError(RefcompError):
    """Sampling settings out of their range (names the setting and the value)."""


@dataclass(frozen=True)
class Sampling:
    """One sequence's settings; the defaults are greedy decoding."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int = 0

    def check(self, candidates: int) -> "Sampling":
        def bad(what):
            raise SamplingError(f"Sampling: {what}")

        if not (
            isinstance(self.temperature, (int, float))
            and self.temperature >= 0
            and math.isfinite(self.temperature)
        ):
            bad(f"temperature must be a finite number >= 0 (0 is greedy), got {self.temperature!r}")
        if not isinstance(self.top_k, int) or not 0 <= self.top_k <= candidates:
            bad(
                f"top_k must be an int in [0, {candidates}] "
                f"(0 is off; the programs rank {candidates} candidates), got {self.top_k!r}"
            )
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            bad(f"top_p must be in (0, 1] (1 is off), got {self.top_p!r}")
        if not (isinstance(self.repetition_penalty, (int, float)) and self.repetition_penalty > 0):
            bad(f"repetition_penalty must be > 0 (1 is off), got {self.repetition_penalty!r}")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2 ** 24:
            bad(f"seed must be an int in [0, 2**24), got {self.seed!r}")
        return self


def candidates_for(vocab: int) -> int:
    return min(vocab, CANDIDATES)


def penalised(logits, rows):
    """transformers' repetition penalty: a seen token's logit divided by the penalty, or multiplied
    when negative; `penalty` (B,) and `seen` (B, vocab) are inputs."""
    penalty = rc_input("penalty", ("B",), ranges=rows).unsqueeze(-1)
    seen = rc_input("seen", ("B", logits.shape[1]), ranges=rows)
    return where(seen > 0, where(logits < 0, logits * penalty, logits / penalty), logits)


def greedy_graph(logits):
    """The most likely token of each row after the repetition penalty (the first of equals)."""
    return penalised(logits, {"B": (1, None)}).argmax(-1)


def sampling_graph(logits) -> dict:
    """The next token of each row of `logits` (B, vocab), with what chose it: `candidates` (token ids,
    most likely first), `probs` (their probabilities after top-k and top-p; 0 for those removed)."""
    vocab = logits.shape[1]
    rows = {"B": (1, None)}
    temperature, top_k, top_p = (rc_input(n, ("B",), ranges=rows) for n in ("temperature", "top_k", "top_p"))
    generator = Generator(rc_input("seed", ()))
    scores = penalised(logits, rows)
    k = candidates_for(vocab)
    values, ids = scores.topk(k, -1)
    greedy = ids[:, 0]
    hot = temperature > 0
    t = where(hot, temperature, 1.0).unsqueeze(-1)
    scaled, everything = values / t, scores / t
    kept_k = iota((1, k), 1) < where(top_k > 0, top_k, float(k)).unsqueeze(-1)
    norm = where(top_k > 0, where(kept_k, scaled, -math.inf).logsumexp(-1), everything.logsumexp(-1))
    probs = where(kept_k, (scaled - norm.unsqueeze(-1)).exp(), 0.0)
    before = probs.cumsum(-1) - probs
    probs = where((before < top_p.unsqueeze(-1)).logical_or((top_p >= 1.0).unsqueeze(-1)), probs, 0.0)
    among = ids.gather(1, probs.multinomial(1, generator=generator))[:, 0]
    whole = everything.softmax(-1).multinomial(1, generator=generator)[:, 0]
    plain = (top_k <= 0).logical_and(top_p >= 1.0)
    token = where(hot, where(plain, whole, among), greedy)
    return {"token": token, "candidates": ids, "probs": probs}


def sampling_feeds(settings: list, seen, step: int) -> dict:
    """The inputs greedy_graph and sampling_graph read, for one Sampling per row; `seen` (B, vocab) as
    kept by the engine. The seed of step s is the first row's seed plus s (mod 2**24): a fresh draw per
    step."""
    import numpy as np
    f = lambda field: np.array([getattr(s, field) for s in settings], np.float32)  # noqa: E731
    seed = (settings[0].seed + step) % 2 ** 24 if settings else 0
    return {"temperature": f("temperature"), "top_k": f("top_k"), "top_p": f("top_p"),
            "penalty": f("repetition_penalty"), "seen": seen, "seed": np.array(seed, np.float32)}
