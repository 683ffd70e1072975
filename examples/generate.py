"""Generate tokens with a small random-weight GPT-2 through refcomp's serving engine.

The engine compiles two programs once, prefill (a chunk of prompt tokens per sequence) and decode
(one token per sequence), both over a paged KV cache with symbolic batch and cache length, then runs
them step by step on the default backend (a GPU through PyCUDA if there is one, else the emulator
that runs the CUDA on the CPU). Prompts of different lengths share the batch; greedy by default,
or sampled (--temperature, --top-k, --top-p) with a seed.

    python examples/generate.py [--layers 2] [--d-model 64] [--batch 4] [--max-new-tokens 32]
                                [--backend emulator|pycuda|numpy] [--temperature 0.8 --top-k 20]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refcomp.serving.engine import Engine  # noqa: E402
from refcomp.serving.models import random_gpt2  # noqa: E402
from refcomp.serving.sampling import Sampling  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--backend", default=None)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    model = random_gpt2(args.layers, args.d_model, args.heads, args.vocab, std=0.2, seed=args.seed)
    engine = Engine(model, pages=128, page_size=16, backend=args.backend)
    prompts = [list(range(1, 4 + 3 * b)) for b in range(args.batch)]  # 3, 6, 9, ... tokens
    sampling = Sampling(args.temperature, args.top_k, args.top_p, seed=args.seed)

    started = time.perf_counter()
    engine.generate(prompts[:1], 2, sampling)  # the two compiles (and builds) happen here, once
    print(f"compiled prefill and decode in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    out = [[] for _ in prompts]
    for i, token in engine.stream(prompts, args.max_new_tokens, sampling):  # tokens as they are chosen
        out[i].append(token)
    seconds = time.perf_counter() - started
    for prompt, tokens in zip(prompts, out):
        print(f"{prompt} -> {tokens}")
    n = sum(map(len, out))
    print(f"{n} tokens in {seconds:.2f} s: {n / seconds:.1f} tokens/s at batch {len(prompts)} "
          f"({engine.compiles} compiles in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
