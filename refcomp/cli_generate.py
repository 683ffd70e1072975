"""`refcomp generate`: generate tokens with a small random-weight GPT-2 (or a transformers config
and safetensors weights) on a backend, printing the tokens and the tokens per second."""
from __future__ import annotations

import json
import time
from pathlib import Path

from .errors import RefcompError


def _model(args):
    from .serving.models import from_transformers, random_gpt2
    if not args.weights:
        return random_gpt2(args.layers, args.d_model, args.heads, args.vocab, std=args.init, seed=args.seed)
    if not args.config:
        raise RefcompError("generate: --weights needs --config (the model's config.json)")
    try:
        fields = json.loads(Path(args.config).read_text())
        import transformers
        config = transformers.AutoConfig.for_model(**fields)
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as e:
        raise RefcompError(f"generate: --config {args.config}: {e}") from None
    return from_transformers(config, args.weights)


def generate_command(args) -> int:
    from .serving.engine import Engine
    from .serving.sampling import Sampling
    model = _model(args)
    try:
        prompt = [int(t) for t in args.prompt.split(",")]
    except ValueError:
        raise RefcompError(
            f"generate: --prompt must be comma-separated token ids, got {args.prompt!r}"
        ) from None
    prompts = [[(t + b) % model.spec.vocab for t in prompt] for b in range(args.batch)]
    engine = Engine(model, pages=args.pages, page_size=args.page_size, backend=args.backend)
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.repetition_penalty, args.seed)
    engine.generate(prompts[:1], 2, sampling)  # compile (and build) both programs first
    compile_s = engine.stats["prefill_s"] + engine.stats["decode_s"]
    engine.stats.update(prefill_s=0.0, decode_s=0.0, decode_steps=0, tokens=0)
    started = time.perf_counter()
    out = [[] for _ in prompts]
    for i, token in engine.stream(prompts, args.max_new_tokens, sampling, ignore_eos=True):
        out[i].append(token)
    seconds = time.perf_counter() - started
    for i, tokens in enumerate(out):
        print(f"[{i}] {' '.join(map(str, prompts[i]))} | {' '.join(map(str, tokens))}")
    s = engine.stats
    decode_rate = s["decode_steps"] * len(prompts) / s["decode_s"] if s["decode_s"] else 0.0
    print(
        f"{s['tokens']} tokens in {seconds:.2f} s: {s['tokens'] / seconds:.1f} tokens/s "
        f"(decode {decode_rate:.1f} tokens/s at batch {len(prompts)}; "
        f"first call with compiles {compile_s:.1f} s; {engine.compiles} compiles)"
    )
    return 0
