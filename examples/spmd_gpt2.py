"""A GPT-2 block on a simulated dp=2 x tp=4 mesh: only the input's sharding is given, the search lays
out the weights, and the result is checked against the single-device program.

    python examples/spmd_gpt2.py            # prints the shardings found, the collectives, and the check
"""
import numpy as np

import refcomp as rc

D, HEADS, HIDDEN = 512, 8, 2048


def gpt2_block():
    x = rc.input("x", ("B", "T", D), sharding=("dp", None, None))  # data parallel over dp
    g1, b1, g2, b2 = (rc.input(n, (D,)) for n in ("g1", "b1", "g2", "b2"))
    wq, wk, wv, wo = (rc.input(n, (D, D)) for n in ("wq", "wk", "wv", "wo"))  # weights: not annotated
    w1, w2 = rc.input("w1", (D, HIDDEN)), rc.input("w2", (HIDDEN, D))
    h = rc.nn.layer_norm(x, g1, b1)

    def heads(t):
        return t.reshape(("B", "T", HEADS, D // HEADS)).transpose(1, 2)

    a = rc.nn.scaled_dot_product_attention(heads(h @ wq), heads(h @ wk), heads(h @ wv), is_causal=True)
    x = x + a.transpose(1, 2).reshape(("B", "T", D)) @ wo
    return x + (rc.nn.layer_norm(x, g2, b2) @ w1).gelu() @ w2


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
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 6, D)).astype(np.float32)}
    feeds |= {n: np.ones(D, np.float32) for n in ("g1", "g2")} | {n: np.zeros(D, np.float32) for n in ("b1", "b2")}
    for n, shape in (("wq", (D, D)), ("wk", (D, D)), ("wv", (D, D)), ("wo", (D, D)), ("w1", (D, HIDDEN)), ("w2", (HIDDEN, D))):
        feeds[n] = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    mesh_out = prog.run(feeds, backend="emulator")
    single = rc.compile(y).run(feeds, backend="emulator")
    print(f"8 simulated devices vs one device (emulator, B=2, T=6): max abs difference {np.abs(mesh_out - single).max():.2e}")


if __name__ == "__main__":
    main()
