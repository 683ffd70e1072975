"""The GSPMD side of bench/spmd_bench.py: JAX on 8 simulated CPU devices (dp2 x tp4), imports only jax
and numpy (run it with a Python that has JAX; refcomp never needs it). Prints one JSON object: per
case, the collectives in the compiled HLO by kind and their bytes per device (each operand's element
count x element size, operands as the per-device program sees them).

    /tmp/jaxenv/bin/python bench/spmd_bench_jax.py
"""
import json
import os
import re
import sys
import time

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

B, T, D, H, HIDDEN = 8, 128, 512, 8, 2048
KINDS = ("all-reduce", "all-gather", "collective-permute", "reduce-scatter", "all-to-all")
ITEMSIZE = {
    "f64": 8,
    "f32": 4,
    "bf16": 2,
    "f16": 2,
    "s64": 8,
    "s32": 4,
    "u32": 4,
    "s8": 1,
    "u8": 1,
    "pred": 1,
}
DEF = re.compile(
    r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\(.*?\)|\w+\[[\d,]*\](?:\{[^}]*\})?)\s+([\w\-]+)\((.*?)\)"
)


def collectives(hlo: str) -> dict:
    """{kind: [bytes per device of each], ...} from the compiled HLO text (async -start ops counted once)."""
    shapes, found = {}, {}
    for line in hlo.splitlines():
        m = DEF.match(line)
        if not m:
            continue
        name, shape, op, args = m.groups()
        shapes[name] = shape
        kind = op[:-len("-start")] if op.endswith("-start") else op
        if kind in KINDS:
            operands = [a.strip().lstrip("%") for a in args.split(",") if a.strip()]
            found.setdefault(kind, []).append(sum(nbytes(shapes[o]) for o in operands))
    return found


def nbytes(shape: str) -> int:
    total = 0
    for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", shape):
        total += int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64)) * ITEMSIZE[dtype]
    return total


def layer_norm(x, g, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * g + b


def attention(q, k, v):
    split = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)
    s = jnp.where(np.tril(np.ones((T, T), bool)), s, -jnp.inf)
    return (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)


def mlp(x, w1, w2):
    return jax.nn.gelu(x @ w1, approximate=True) @ w2


def block(x, g1, b1, g2, b2, wq, wk, wv, wo, w1, w2):
    h = layer_norm(x, g1, b1)
    x = x + attention(h @ wq, h @ wk, h @ wv) @ wo
    return x + mlp(layer_norm(x, g2, b2), w1, w2)


def block_fused(x, g1, b1, g2, b2, wqkv, wo, w1, w2):
    h = layer_norm(x, g1, b1)
    x = x + attention(*jnp.split(h @ wqkv, 3, axis=-1)) @ wo
    return x + mlp(layer_norm(x, g2, b2), w1, w2)


def main() -> int:
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("dp", "tp"))
    x, rep, col, row = ((B, T, D), P("dp", None, None)), ((D,), P(None)), P(None, "tp"), P("tp", None)
    cases = {  # name: (function, [(shape, spec) per argument])
        "mlp_by_hand": (mlp, [x, ((D, HIDDEN), col), ((HIDDEN, D), row)]),
        "gpt2_by_hand": (
            block,
            [
                x,
                rep,
                rep,
                rep,
                rep,
                ((D, D), col),
                ((D, D), col),
                ((D, D), col),
                ((D, D), row),
                ((D, HIDDEN), col),
                ((HIDDEN, D), row),
            ],
        ),
        "gpt2_fused_qkv_natural": (
            block_fused,
            [x, rep, rep, rep, rep, ((D, 3 * D), col), ((D, D), row), ((D, HIDDEN), col), ((HIDDEN, D), row)],
        ),
    }
    out = {"jax": jax.__version__, "devices": len(jax.devices()), "cases": {}}
    for name, (fn, args) in cases.items():
        started = time.perf_counter()
        jitted = jax.jit(fn, in_shardings=tuple(NamedSharding(mesh, s) for _, s in args),
                         out_shardings=NamedSharding(mesh, P("dp", None, None)))
        hlo = (
            jitted.lower(*(jax.ShapeDtypeStruct(shape, jnp.float32) for shape, _ in args)).compile().as_text()
        )
        found = collectives(hlo)
        out["cases"][name] = {
            "counts": {k: len(v) for k, v in found.items()},
            "bytes": {k: v for k, v in found.items()},
            "bytes_per_device": sum(sum(v) for v in found.values()),
            "compile_s": time.perf_counter() - started,
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
