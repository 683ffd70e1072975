"""A GPT-2 block on a simulated dp=2 x tp=4 mesh: only the input's sharding is given, the search lays
out the weights, and the result is checked against the single-device program.

    python examples/spmd_gpt2.py            # prints the shardings found, the collectives, and the check
"""
import numpy as np

import refcomp as rc

D, HEADS, HIDDEN = 512, 8, 2048


def gpt2_block(fused_qkv: bool = False, d: int = D, heads: int = HEADS, hidden: int = HIDDEN):
    """Pre-norm GPT-2 block, x split over dp and every weight left to the search: separate q, k, v
    projections, or (fused_qkv) one (D, 3D) weight sliced after the projection, as Hugging Face's."""
    x = rc.input("x", ("B", "T", d), sharding=("dp", None, None))
    g1, b1, g2, b2 = (rc.input(n, (d,)) for n in ("g1", "b1", "g2", "b2"))
    wo, w1, w2 = rc.input("wo", (d, d)), rc.input("w1", (d, hidden)), rc.input("w2", (hidden, d))
    h = rc.nn.layer_norm(x, g1, b1)
    if fused_qkv:
        qkv = h @ rc.input("wqkv", (d, 3 * d))
        q, k, v = (qkv[..., i * d:(i + 1) * d] for i in range(3))
    else:
        q, k, v = (h @ rc.input(n, (d, d)) for n in ("wq", "wk", "wv"))

    def heads_of(t):
        return t.reshape(("B", "T", heads, d // heads)).transpose(1, 2)

    a = rc.nn.scaled_dot_product_attention(heads_of(q), heads_of(k), heads_of(v), is_causal=True)
    x = x + a.transpose(1, 2).reshape(("B", "T", d)) @ wo
    return x + (rc.nn.layer_norm(x, g2, b2) @ w1).gelu(approximate="tanh") @ w2


def block_feeds(rng, batch: int, t: int, fused_qkv: bool = False, d: int = D, hidden: int = HIDDEN) -> dict:
    """Random feeds for gpt2_block: unit norms, weights scaled so activations stay O(1)."""
    feeds = {"x": rng.standard_normal((batch, t, d)).astype(np.float32)}
    feeds |= {n: np.ones(d, np.float32) for n in ("g1", "g2")} | {
        n: np.zeros(d, np.float32) for n in ("b1", "b2")
    }
    shapes = {"wqkv": (d, 3 * d)} if fused_qkv else {n: (d, d) for n in ("wq", "wk", "wv")}
    shapes |= {"wo": (d, d), "w1": (d, hidden), "w2": (hidden, d)}
    feeds |= {n: (rng.standard_normal(s) * 0.02).astype(np.float32) for n, s in shapes.items()}
    return feeds


def main():
    y = gpt2_block()
    prog = rc.spmd.compile(y, rc.Mesh({"dp": 2, "tp": 4}), dims_hint={"B": 8, "T": 128})
    print(prog)
    print("weights laid out by the search:")
    for name in ("wq", "wk", "wv", "wo", "w1", "w2"):
        print(f"  {name}: {prog.shardings[name]}")
    print("collectives per step:")
    for c in prog.collectives:
        print(f"  {c}")
    feeds = block_feeds(np.random.default_rng(0), 2, 6)
    mesh_out = prog.run(feeds, backend="emulator")
    single = rc.compile(y).run(feeds, backend="emulator")
    print(
        f"8 simulated devices vs one device (emulator, B=2, T=6): "
        f"max abs difference {np.abs(mesh_out - single).max():.2e}"
    )


if __name__ == "__main__":
    main()
