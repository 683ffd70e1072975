"""Decoder models built from refcomp's own ops, from a transformers config and a state dict.

A model here is its weights (NumPy float32 arrays, fed to the programs by name) and a `hidden`
method that builds one step's graph for a chunk of tokens per sequence. Attention is the caller's:
the serving programs (programs.py) pass an `attend(layer, q, k, v)` that reads the paged cache, so
the model knows nothing of pages and the same blocks serve prefill, decode and the full-sequence
forward. Two families: GPT-2 (learned positions, LayerNorm, tanh GELU, tied head) and LLaMA
(RMSNorm, rotary embeddings, SwiGLU, grouped-query attention).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import RefcompError
from ..ops import nn
from ..ops.core import input as rc_input
from ..ops.joining import cat


class ModelError(RefcompError):
    """A config or state dict the serving models cannot use (names the key or the field)."""


@dataclass(frozen=True)
class Spec:
    """The shape of a decoder, read once from its transformers config."""
    family: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int
    eps: float
    eos_token_id: tuple = ()
    rope_theta: float = 10000.0


class Decoder:
    """Weights plus the graph of one step; subclasses name their tensors and blocks."""

    def __init__(self, spec: Spec, weights: dict):
        self.spec, self.weights = spec, weights
        self._inputs = {}

    def w(self, name: str):
        """The weight `name` as an input of the graph being built (one Input per name)."""
        if name not in self._inputs:
            if name not in self.weights:
                raise ModelError(f"{self.spec.family} model: no weight named {name!r}")
            self._inputs[name] = rc_input(name, self.weights[name].shape)
        return self._inputs[name]

    def begin(self):
        """A fresh set of weight inputs for a new graph."""
        self._inputs = {}

    def feeds(self) -> dict:
        return dict(self.weights)

    def split_heads(self, x, heads: int):
        """(B, C, heads * hd) -> (B, heads, C, hd)."""
        b, c = x.shape[0], x.shape[1]
        return x.reshape((b, c, heads, self.spec.head_dim)).permute(0, 2, 1, 3)

    def merge_heads(self, x):
        b, h, c, d = x.shape
        return x.permute(0, 2, 1, 3).reshape((b, c, h * d))


class GPT2(Decoder):
    def hidden(self, ids, positions, attend):
        s = self.spec
        x = self.w("wte.weight").index_select(0, ids) + self.w("wpe.weight").index_select(0, positions)
        for i in range(s.layers):
            p = f"h.{i}."
            a = nn.layer_norm(x, (s.d_model,), self.w(p + "ln_1.weight"), self.w(p + "ln_1.bias"), s.eps)
            qkv = a @ self.w(p + "attn.c_attn.weight") + self.w(p + "attn.c_attn.bias")
            d = s.d_model
            q, k, v = (self.split_heads(qkv[:, :, j * d:(j + 1) * d], s.heads) for j in range(3))
            o = self.merge_heads(attend(i, q, k, v))
            x = x + o @ self.w(p + "attn.c_proj.weight") + self.w(p + "attn.c_proj.bias")
            m = nn.layer_norm(x, (s.d_model,), self.w(p + "ln_2.weight"), self.w(p + "ln_2.bias"), s.eps)
            m = (m @ self.w(p + "mlp.c_fc.weight") + self.w(p + "mlp.c_fc.bias")).gelu(approximate="tanh")
            x = x + m @ self.w(p + "mlp.c_proj.weight") + self.w(p + "mlp.c_proj.bias")
        return nn.layer_norm(x, (s.d_model,), self.w("ln_f.weight"), self.w("ln_f.bias"), s.eps)

    def logits(self, rows):
        return rows @ self.w("wte.weight").T


class Llama(Decoder):
    def rotate(self, x, cos, sin):
        """transformers' apply_rotary_pos_emb: x cos + rotate_half(x) sin, cos and sin (B, 1, C, hd)."""
        half = self.spec.head_dim // 2
        return x * cos + cat([-x[..., half:], x[..., :half]], -1) * sin

    def hidden(self, ids, positions, attend):
        s = self.spec
        x = self.w("embed_tokens.weight").index_select(0, ids)
        cos = self.w("rope_cos").index_select(0, positions).unsqueeze(1)  # (B, 1, C, hd)
        sin = self.w("rope_sin").index_select(0, positions).unsqueeze(1)
        for i in range(s.layers):
            p = f"layers.{i}."
            a = nn.rms_norm(x, (s.d_model,), self.w(p + "input_layernorm.weight"), s.eps)
            q = self.split_heads(nn.linear(a, self.w(p + "self_attn.q_proj.weight")), s.heads)
            k = self.split_heads(nn.linear(a, self.w(p + "self_attn.k_proj.weight")), s.kv_heads)
            v = self.split_heads(nn.linear(a, self.w(p + "self_attn.v_proj.weight")), s.kv_heads)
            o = self.merge_heads(attend(i, self.rotate(q, cos, sin), self.rotate(k, cos, sin), v))
            x = x + nn.linear(o, self.w(p + "self_attn.o_proj.weight"))
            m = nn.rms_norm(x, (s.d_model,), self.w(p + "post_attention_layernorm.weight"), s.eps)
            gate = nn.linear(m, self.w(p + "mlp.gate_proj.weight"))
            m = nn.silu(gate) * nn.linear(m, self.w(p + "mlp.up_proj.weight"))
            x = x + nn.linear(m, self.w(p + "mlp.down_proj.weight"))
        return nn.rms_norm(x, (s.d_model,), self.w("norm.weight"), s.eps)

    def logits(self, rows):
        return nn.linear(rows, self.w("lm_head.weight"))


# --- loading -------------------------------------------------------------------------------------

def _arrays(state) -> dict:
    """A state dict (torch tensors or arrays) or a safetensors file as float32 NumPy arrays."""
    if isinstance(state, (str, Path)):
        path = Path(state)
        if path.suffix != ".safetensors":
            raise ModelError(f"weights file {path}: only .safetensors files are read (no pickles)")
        from safetensors.numpy import load_file
        try:
            return {k: np.asarray(v, np.float32) for k, v in load_file(str(path)).items()}
        except Exception as e:  # OSError, or safetensors' own SafetensorError for a damaged file
            raise ModelError(f"weights file {path}: {e}") from None
    if not isinstance(state, dict):
        raise ModelError(f"weights must be a state dict or a .safetensors path, got {type(state).__name__}")
    out = {}
    for k, v in state.items():
        if hasattr(v, "detach"):
            v = v.detach().float().cpu().numpy()
        out[k] = np.asarray(v, np.float32)
    return out


def _strip(weights: dict, prefixes) -> dict:
    out = {}
    for k, v in weights.items():
        for p in prefixes:
            if k.startswith(p):
                k = k[len(p):]
                break
        out[k] = v
    return out


def _need(config, field: str):
    value = getattr(config, field, None)
    if value is None:
        raise ModelError(f"{type(config).__name__}: the field {field!r} is missing")
    return value


def _eos(config) -> tuple:
    e = getattr(config, "eos_token_id", None)
    return () if e is None else tuple(e) if isinstance(e, (list, tuple)) else (int(e),)


def rope_tables(spec: Spec):
    """cos and sin of position x inverse frequency, (max_positions, head_dim), computed in float32
    as transformers' default rotary embedding computes them."""
    hd = spec.head_dim
    inv = (1.0 / (spec.rope_theta ** (np.arange(0, hd, 2, dtype=np.int64).astype(np.float32) / hd))).astype(
        np.float32
    )
    freqs = np.outer(np.arange(spec.max_positions, dtype=np.float32), inv).astype(np.float32)
    emb = np.concatenate([freqs, freqs], -1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def from_transformers(config, state) -> Decoder:
    """A Decoder from a transformers config (GPT2Config or LlamaConfig, or one of their model
    types) and its weights: a state dict (`model.state_dict()`) or a .safetensors file."""
    kind = getattr(config, "model_type", None)
    weights = _arrays(state)
    if kind == "gpt2":
        d, heads = _need(config, "n_embd"), _need(config, "n_head")
        spec = Spec(
            "gpt2",
            _need(config, "n_layer"),
            d,
            heads,
            heads,
            d // heads,
            _need(config, "vocab_size"),
            _need(config, "n_positions"),
            float(_need(config, "layer_norm_epsilon")),
            _eos(config),
        )
        weights = _strip(weights, ("transformer.",))
        weights.pop("lm_head.weight", None)  # tied to wte
        model = GPT2(spec, weights)
    elif kind == "llama":
        d, heads = _need(config, "hidden_size"), _need(config, "num_attention_heads")
        rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
        if rope.get("rope_type", "default") != "default":
            raise ModelError(
                f"LlamaConfig: rope_type {rope.get('rope_type')!r} is not supported (only 'default')"
            )
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        spec = Spec(
            "llama",
            _need(config, "num_hidden_layers"),
            d,
            heads,
            getattr(config, "num_key_value_heads", None) or heads,
            getattr(config, "head_dim", None) or d // heads,
            _need(config, "vocab_size"),
            _need(config, "max_position_embeddings"),
            float(_need(config, "rms_norm_eps")),
            _eos(config),
            float(theta),
        )
        if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
            raise ModelError("LlamaConfig: attention_bias and mlp_bias are not supported")
        weights = _strip(weights, ("model.",))
        if "lm_head.weight" not in weights or getattr(config, "tie_word_embeddings", False):
            weights["lm_head.weight"] = weights["embed_tokens.weight"]
        weights["rope_cos"], weights["rope_sin"] = rope_tables(spec)
        model = Llama(spec, weights)
    else:
        raise ModelError(f"model_type {kind!r}: the serving models are 'gpt2' and 'llama'")
    if spec.heads % spec.kv_heads:
        raise ModelError(f"{kind}: {spec.heads} attention heads cannot share {spec.kv_heads} key/value heads")
    _check_shapes(model)
    return model


def _check_shapes(model: Decoder) -> None:
    s = model.spec
    want = {
        "gpt2": {"wte.weight": (s.vocab, s.d_model), "wpe.weight": (s.max_positions, s.d_model)},
        "llama": {"embed_tokens.weight": (s.vocab, s.d_model), "lm_head.weight": (s.vocab, s.d_model)},
    }[s.family]
    for name, shape in want.items():
        got = model.weights.get(name)
        if got is None:
            raise ModelError(f"{s.family} state dict: the weight {name!r} is missing")
        if tuple(got.shape) != shape:
            raise ModelError(
                f"{s.family} state dict: {name!r} has shape {tuple(got.shape)}, the config says {shape}"
            )


def scale(spec: Spec) -> float:
    return 1.0 / math.sqrt(spec.head_dim)


def random_gpt2(layers: int = 2, d_model: int = 64, heads: int = 4, vocab: int = 256, positions: int = 256,
                std: float = 0.02, seed: int = 0) -> GPT2:
    """A GPT-2 with random weights drawn by NumPy (normal(0, std) matrices, unit LayerNorm gains, zero
    biases, as transformers initialises it): the example's and the command line's model, which
    need neither torch nor a download."""
    if d_model % heads:
        raise ModelError(f"random_gpt2: d_model {d_model} is not a multiple of heads {heads}")
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.normal(0.0, std, shape).astype(np.float32)  # noqa: E731
    w = {"wte.weight": normal(vocab, d_model), "wpe.weight": normal(positions, d_model),
         "ln_f.weight": np.ones(d_model, np.float32), "ln_f.bias": np.zeros(d_model, np.float32)}
    for i in range(layers):
        p = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            w[p + ln + ".weight"], w[p + ln + ".bias"] = (
                np.ones(d_model, np.float32),
                np.zeros(d_model, np.float32),
            )
        for name, (n_in, n_out) in {
            "attn.c_attn": (d_model, 3 * d_model),
            "attn.c_proj": (d_model, d_model),
            "mlp.c_fc": (d_model, 4 * d_model),
            "mlp.c_proj": (4 * d_model, d_model),
        }.items():
            w[p + name + ".weight"], w[p + name + ".bias"] = normal(n_in, n_out), np.zeros(n_out, np.float32)
    return GPT2(Spec("gpt2", layers, d_model, heads, heads, d_model // heads, vocab, positions, 1e-5), w)
