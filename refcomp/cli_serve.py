"""`refcomp serve MODEL`: an OpenAI-compatible endpoint (serving/server.py) on uvicorn, over a
continuous-batching scheduler with a prefix cache. Starlette and uvicorn are the `serve` extra,
imported here, when the command runs, so `import refcomp` and the other commands never load them."""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from .errors import RefcompError


def load_model(args):
    """random-gpt2 (generate's options), or a directory with config.json and model.safetensors."""
    from .serving.models import from_transformers, random_gpt2
    if args.model == "random-gpt2":
        return random_gpt2(args.layers, args.d_model, args.heads, args.vocab, std=args.init, seed=args.seed)
    folder = Path(args.model)
    config, weights = folder / "config.json", folder / "model.safetensors"
    if not (config.is_file() and weights.is_file()):
        raise RefcompError(f"serve: MODEL {args.model!r} is neither random-gpt2 nor a directory holding "
                           f"config.json and model.safetensors")
    try:
        import transformers
        config = transformers.AutoConfig.for_model(**json.loads(config.read_text()))
    except ImportError:
        raise RefcompError(
            "serve: reading a transformers config needs transformers (the [models] extra)"
        ) from None
    except (OSError, ValueError, TypeError, KeyError, RecursionError) as e:
        raise RefcompError(f"serve: {config}: {e}") from None
    return from_transformers(config, weights)


def build(args):
    """(the Starlette app, its Worker) for the command's arguments, the programs compiled."""
    try:
        from .serving.server import create_app
    except ImportError as e:
        raise RefcompError(f"serve: {e.name} is missing: pip install 'refcomp[serve]'") from None
    from .serving.engine import Engine
    from .serving.sampling import Sampling
    from .serving.scheduler import Scheduler
    from .serving.worker import Worker
    engine = Engine(load_model(args), pages=args.pages, page_size=args.page_size, backend=args.backend,
                    prefill_chunk=args.prefill_chunk)
    # compile (and build) the step programs and the sampler (temperature 1 is the API's default) first
    engine.generate([[0, 0]], 2, Sampling(temperature=1.0), ignore_eos=True)
    scheduler = Scheduler(engine, step_tokens=args.step_tokens, prefix_cache=not args.no_prefix_cache)
    worker = Worker(scheduler)
    name = args.served_name or (args.model if args.model == "random-gpt2" else Path(args.model).name)
    return create_app(worker, name), worker


def serve_command(args) -> int:
    try:
        import uvicorn
    except ImportError:
        raise RefcompError("serve: uvicorn is missing: pip install 'refcomp[serve]'") from None
    app, worker = build(args)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
        sock.listen(128)  # before the address is printed: a client that reads it may connect at once
    except OSError as e:
        raise RefcompError(f"serve: cannot listen on {args.host}:{args.port}: {e.strerror}") from None
    host, port = sock.getsockname()[:2]
    print(f"refcomp: serving {args.model} on http://{host}:{port}/v1 (Ctrl-C stops)", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    try:
        server.run(sockets=[sock])
    finally:
        worker.close()
        sock.close()
    sys.stdout.flush()
    return 0
