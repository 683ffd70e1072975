"""An independent oracle for the serving tests: GPT-2's full-sequence forward written in NumPy from
its definition (no cache, no pages, no refcomp graph), and greedy decoding by recomputing it."""
from __future__ import annotations

import functools

import numpy as np

from refcomp.serving.models import random_gpt2


def _layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(model, ids) -> np.ndarray:
    """(T, vocab) float64 logits of every position of one sequence."""
    s, w = model.spec, {k: v.astype(np.float64) for k, v in model.weights.items()}
    t = len(ids)
    x = w["wte.weight"][ids] + w["wpe.weight"][np.arange(t)]
    causal = np.tril(np.ones((t, t), bool))
    for i in range(s.layers):
        p = f"h.{i}."
        a = _layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"], s.eps)
        q, k, v = np.split(a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"], 3, -1)
        heads = [h.reshape(t, s.heads, s.head_dim).transpose(1, 0, 2) for h in (q, k, v)]
        scores = heads[0] @ heads[1].transpose(0, 2, 1) / np.sqrt(s.head_dim)
        scores = np.where(causal, scores, -np.inf)
        p_attn = np.exp(scores - scores.max(-1, keepdims=True))
        p_attn /= p_attn.sum(-1, keepdims=True)
        o = (p_attn @ heads[2]).transpose(1, 0, 2).reshape(t, s.d_model)
        x = x + o @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = _layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"], s.eps)
        m = _gelu(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = _layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], s.eps)
    return x @ w["wte.weight"].T


def greedy(model, prompt, new: int) -> list:
    tokens = list(prompt)
    for _ in range(new):
        tokens.append(int(gpt2_logits(model, tokens)[-1].argmax()))
    return tokens[len(prompt):]


@functools.lru_cache(maxsize=None)
def tiny_model():
    """The smallest random GPT-2 whose greedy tokens vary (a wide initialiser)."""
    return random_gpt2(layers=1, d_model=16, heads=2, vocab=64, positions=96, std=0.5, seed=1)


@functools.lru_cache(maxsize=None)
def alone(prompt: tuple, new: int) -> list:
    """The greedy tokens of `prompt` generated on its own, by the oracle."""
    return greedy(tiny_model(), prompt, new)


def prompt(length: int, variant: int = 0) -> list:
    return [(7 * variant + 5 * j + j * j) % 64 for j in range(length)]
