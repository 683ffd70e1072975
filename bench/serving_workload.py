"""The scheduler's workload for bench/serving_bench.py: C clients in a closed loop, each sending ROUNDS
requests one after the other (the next as soon as the last one's final token comes), every prompt a
shared system prompt plus a short question of its own, and answers of different lengths.

Each configuration (continuous batching on or off, the prefix cache on or off) runs the same
requests on the same engine (its programs compiled once, before), and reports throughput (new
tokens per second of wall time), the time to first token (from a request's arrival to its first
token), the steps, the tokens prefilled and hit in the cache, and the modeled GPU time of the same
steps: each program run priced by the cost model at its own batch, chunk and block-table width.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

SYSTEM = [(11 * j + 3) % 200 + 1 for j in range(96)]  # the shared system prompt (6 pages of 16)
ROUNDS = 3


def request(client: int, round_: int) -> tuple:
    """(prompt, new tokens) of a client's round: the system prompt, 4 to 11 tokens of its own, and an
    answer of 4 to 19 tokens."""
    own = [(7 * client + 13 * round_ + 5 * j) % 200 + 1 for j in range(4 + (3 * client + round_) % 8)]
    return SYSTEM + own, 4 + (5 * client + 7 * round_) % 16


def run(engine, clients: int, continuous: bool, cache: bool, prices: dict) -> dict:
    from refcomp.serving.scheduler import Scheduler
    scheduler = Scheduler(engine, step_tokens=256, prefix_cache=cache, continuous=continuous)
    scheduler.runs = []
    owner, arrived, first, finished = {}, {}, {}, 0

    def submit(client, round_, now):
        prompt, new = request(client, round_)
        r = scheduler.add(prompt, new, ignore_eos=True)
        owner[r.id], arrived[r.id] = (client, round_), now

    started = time.perf_counter()
    for c in range(clients):
        submit(c, 0, started)
    while not scheduler.idle:
        events = scheduler.step()
        now = time.perf_counter()
        for q, _ in events:
            first.setdefault(q.id, now - arrived[q.id])
            if q.state == "finished":
                finished += 1
                client, round_ = owner[q.id]
                if round_ + 1 < ROUNDS:
                    submit(client, round_ + 1, now)
    seconds = time.perf_counter() - started
    modeled = [price(engine, run_, prices) for run_ in scheduler.runs]
    ttft = np.array(list(first.values()))
    row = {
        "clients": clients,
        "requests": finished,
        "continuous_batching": continuous,
        "prefix_cache": cache,
        "new_tokens": scheduler.stats["tokens"],
        "tokens_per_s": scheduler.stats["tokens"] / seconds,
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p90_s": float(np.percentile(ttft, 90)),
        "seconds": seconds,
        "steps": scheduler.steps,
        "largest_step": scheduler.stats["largest_step"],
        "prefill_tokens": scheduler.stats["prefill_tokens"],
        "hit_tokens": scheduler.cache.stats["hit_tokens"] if cache else 0,
        "program_runs": len(scheduler.runs),
        "modeled_gpu_s": sum(modeled),
        "modeled_gpu_per_step_us": sum(modeled) / scheduler.steps * 1e6,
        "modeled_tokens_per_s": scheduler.stats["tokens"] / sum(modeled),
    }
    print(f"{clients:>2} clients, continuous {continuous!s:5}, cache {cache!s:5}: "
          f"{row['tokens_per_s']:.1f} tok/s, TTFT {row['ttft_mean_s']:.2f} s (p90 {row['ttft_p90_s']:.2f}), "
          f"{row['steps']} steps, prefilled {row['prefill_tokens']} (hit {row['hit_tokens']}); modeled "
          f"{row['modeled_gpu_per_step_us']:.0f} us/step, {row['modeled_tokens_per_s']:.0f} tok/s",
          flush=True)
    return row


def price(engine, run_, prices: dict) -> float:
    """Modeled seconds of one program run (kind, rows, chunk width, table width) on the H200 model."""
    kind, rows, width, table = run_
    key = (kind, rows, width, table)
    if key not in prices:
        program = engine.compiled(kind)
        bindings = {"B": rows, "NP": table, **({"C": width} if kind == "prefill" else {})}
        costs, _ = program.pricing.costs_at(program, bindings)
        prices[key] = sum(c.time_s for c in costs)
    return prices[key]


def scheduler_rows(concurrency=(1, 8, 32)) -> list:
    from refcomp.serving.engine import Engine
    from refcomp.serving.models import random_gpt2
    from refcomp.pipeline.program_cache import ENV
    model = random_gpt2(layers=2, d_model=64, heads=4, vocab=256, positions=256, std=0.2)
    engine = Engine(model, pages=512, page_size=16, backend="emulator", prefill_chunk=64)
    started = time.perf_counter()
    # both compiles, outside the timings, in an empty program cache: a program loaded from the cache keeps
    # the costs it was saved with, so the modeled steps would not be priced at their own bindings
    before = os.environ.get(ENV)
    with tempfile.TemporaryDirectory() as fresh:
        os.environ[ENV] = fresh
        try:
            engine.generate([[1, 2, 3]], 2)
        finally:
            if before is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = before
    print(f"scheduler workload: compiles {time.perf_counter() - started:.1f} s", flush=True)
    rows, prices = [], {}
    run(engine, 2, True, True, prices)  # a warm-up, not recorded: the first runs of the emulator are slower
    for clients in concurrency:
        for continuous, cache in ((False, False), (True, False), (True, True)):
            rows.append(run(engine, clients, continuous, cache, prices))
    return rows
