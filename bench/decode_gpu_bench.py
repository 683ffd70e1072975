"""GPT-2 small's decode step on a GPU beside the cost model: issue 30's headline figure, measured.

The serving bench prices the step (bench/serving_bench.py: 332 us at batch 1, 1,036 us at batch 32
under the H200 model, 3 us a launch). Here the same program runs on the GPU at a full context (every
sequence 1,023 tokens in, its 1,024th decoded; random weights and pool):

* once through `Program.run`, its greedy tokens and logits checked against the NumPy reference;
* timed kernels only (`exec.timing.time_program`: cold L2, rounds queued behind a spin kernel),
  the whole step and each kernel beside its modeled time;
* the same launches captured in one CUDA graph (libcuda's stream capture through ctypes, as
  bench/launch_bench.py does) and launched with one call: what the step costs launched as serving
  engines launch it, the figure the model's 3 us a launch stands in for;
* whole `Program.run` calls, every array fed beside the weights and the pool held on the device
  (exec.resident, as the engine holds them): what the runner's host work and copies add to a step.

Runs only where PyCUDA and a CUDA device are usable; elsewhere it prints "skipped: <reason>" and
exits 0 (`--backend emulator --tiny` runs the first part on the host, as tests/test_decode_gpu_bench.py
does).

    python bench/decode_gpu_bench.py [--batches 1 32] [--repeats 10]

Writes bench/results/decode_gpu.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import refcomp as rc  # noqa: E402
from refcomp import golden  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_bench import no_gpu, time_as_graph  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SMALL = dict(layers=12, d_model=768, heads=12, vocab=50257, positions=1024)  # GPT-2 small
TINY = dict(layers=2, d_model=64, heads=4, vocab=97, positions=128)


def decode_case(batch: int, context: int, page_size: int = 16, sizes: dict = SMALL, seed: int = 0):
    """(outputs, program, feeds) of a decode step where each of `batch` sequences has context - 1
    tokens in the pool and decodes its last: random weights, random keys and values in the pool."""
    from refcomp.serving.kv_cache import PagedKVPool
    from refcomp.serving.models import random_gpt2
    from refcomp.serving.programs import step_graph
    from refcomp.serving.sampling import greedy_graph

    rng = np.random.default_rng(seed)
    model = random_gpt2(**sizes)
    pages = -(-context // page_size)
    pool = PagedKVPool(batch * pages, page_size, sizes["layers"], sizes["heads"],
                       sizes["d_model"] // sizes["heads"])
    keys = list(range(batch))
    for key in keys:
        pool.allocate(key, context)
    feeds = {name: rng.standard_normal(array.shape, dtype=np.float32)
             for name, array in pool.feeds().items()}
    vocab = sizes["vocab"]
    feeds.update(model.feeds())
    feeds.update({
        "ids": rng.integers(0, vocab, (batch, 1)).astype(np.int32),
        "positions": np.full((batch, 1), context - 1, np.int32),
        "cached": np.full(batch, context - 1, np.float32),
        "lengths": np.full(batch, context, np.float32),
        "block_table": pool.block_tables(keys),
        "slots": pool.slot_matrix(keys, [context - 1] * batch, [1] * batch, 1),
        "penalty": np.ones(batch, np.float32),
        "seen": np.zeros((batch, vocab), np.float32),
    })
    outputs = step_graph(model, pool, 1, greedy_graph)
    program = rc.compile(outputs, dims_hint={"B": batch, "NP": pages}, cache=False)
    return outputs, program, feeds


def checked_run(outputs, program, feeds, backend: str) -> dict:
    """One Program.run on `backend`: its tokens equal to the reference's, its logits within float32's
    tolerance (the reference in float64)."""
    got = program.run(feeds, backend=backend)
    want = rc.evaluate({"logits": outputs["logits"], "token": outputs["token"]}, feeds, precision="float64")
    error = float(np.max(np.abs(got["logits"] - want["logits"])))
    np.testing.assert_allclose(got["logits"], want["logits"], **golden.FLOAT32_TOLERANCE)
    same = bool(np.array_equal(got["token"], want["token"]))
    return {"same_tokens": same, "max_logit_error": error}


def held_names(feeds) -> list:
    """The feeds a serving engine holds on the device (exec.resident): the weights and the pool."""
    return [name for name, a in feeds.items() if np.asarray(a).dtype.kind == "f"
            and name not in ("cached", "lengths", "penalty", "seen")]


def runner_time(program, feeds, repeats: int, backend: str) -> dict:
    """Wall-clock time of whole `Program.run` calls (binding, uploads, allocation, launches,
    downloads): every array fed, beside the weights and the pool held on the device as the engine
    holds them (exec.resident), the held run's tokens equal to the fed run's."""
    import time
    from refcomp.exec.resident import Resident

    held = Resident({name: feeds[name] for name in held_names(feeds)}, backend)
    step = {name: a for name, a in feeds.items() if name not in held}
    fed, kept, tokens = [], [], []
    for _ in range(repeats):
        for times, run in ((fed, lambda: program.run(feeds, backend=backend)),
                           (kept, lambda: program.run(step, backend=backend, resident=held))):
            started = time.perf_counter()
            got = run()
            times.append(time.perf_counter() - started)
            tokens.append(np.asarray(got["token"]))
    return {"fed_median_ms": statistics.median(fed) * 1e3,
            "resident_median_ms": statistics.median(kept) * 1e3,
            "fed_rounds_ms": [t * 1e3 for t in fed], "resident_rounds_ms": [t * 1e3 for t in kept],
            "same_tokens": all(np.array_equal(t, tokens[0]) for t in tokens),
            "held_mb": sum(np.asarray(feeds[n]).nbytes for n in held) / 1e6}


def graph_time(program, feeds, repeats: int) -> dict:
    """The step's launches captured in one CUDA graph, launched `repeats` times (after one that uploads
    it): the median device time of a launch of the whole step, and the host's time per launch call."""
    from refcomp.exec.timing import prepared_launches

    launches, owned = prepared_launches(program, feeds, None)

    def enqueue(stream):
        for _, fn, g, b, args in launches:
            fn.prepared_async_call(g, b, stream, *args)

    try:
        device, host = time_as_graph(enqueue, repeats)
        return {"median_us": statistics.median(device) * 1e6, "rounds_us": [t * 1e6 for t in device],
                "host_us_per_launch_call": statistics.median(host) * 1e6, "kernels": len(launches),
                "l2": "warm (no flush between graph launches)"}
    finally:
        for buf in owned:
            buf.allocation.free()


def measure(batch: int, context: int, repeats: int) -> dict:
    from refcomp.exec.timing import time_program

    outputs, program, feeds = decode_case(batch, context)
    row = {"batch": batch, "context": context, "kernels": len(program.kernels),
           "modeled_us": program.cost.time_s * 1e6}
    for name, part in (
        ("check", lambda: checked_run(outputs, program, feeds, "pycuda")),
        ("stream", lambda: _stream(time_program(program, feeds, repeats=repeats, warmup=3))),
        ("per_kernel", lambda: _per_kernel(program, time_program(program, feeds, repeats=repeats, warmup=1,
                                                                 per_kernel=True))),
        ("graph", lambda: graph_time(program, feeds, repeats)),
        ("runner", lambda: runner_time(program, feeds, max(3, repeats // 3), "pycuda")),
    ):
        try:  # one failure never loses the others
            row[name] = part()
        except Exception:
            row[name] = {"error": traceback.format_exc(limit=4)}
    return row


def _stream(timing) -> dict:
    return {"median_us": timing.median_s * 1e6, "rounds_us": [t * 1e6 for t in timing.rounds_s],
            "host_bound": timing.host_bound, "l2": "cold (flushed before each round)"}


def _per_kernel(program, timing) -> list:
    """Each launched kernel's median beside its modeled time (a kernel with no work at the binding is
    not launched, so the two lists are matched by name)."""
    modeled = {k.name: k.cost.time_s for k in program.kernels}
    return [{"kernel": name, "measured_us": seconds * 1e6, "modeled_us": modeled[name] * 1e6}
            for name, seconds in timing.kernels]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--backend", default="pycuda", help="emulator: only the checked run")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer, d=64 GPT-2 (a smoke test)")
    parser.add_argument("--out", default=str(RESULTS / "decode_gpu.json"),
                        help="JSON output path ('' for none)")
    args = parser.parse_args(argv)
    if args.backend != "pycuda":
        for batch in args.batches:
            outputs, program, feeds = decode_case(batch, args.context, sizes=TINY if args.tiny else SMALL)
            print(f"batch {batch}: {checked_run(outputs, program, feeds, args.backend)}")
            runner = runner_time(program, feeds, 3, args.backend)
            print(f"batch {batch}: Program.run {runner['fed_median_ms']:.1f} ms fed, "
                  f"{runner['resident_median_ms']:.1f} ms with {runner['held_mb']:.1f} MB held")
        return 0
    if no_gpu():
        return 0
    rows = []
    for batch in args.batches:  # written after each batch: a run cut short keeps what it measured
        rows.append(measure(batch, args.context, args.repeats))
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"{'batch':>5}  {'kernels':>7}  {'modeled us':>10}  {'measured us':>11}  {'as a graph us':>13}  "
          f"{'run fed ms':>10}  {'run held ms':>11}  tokens")
    for row in rows:
        shown = [row[k].get(f) for k, f in (("stream", "median_us"), ("graph", "median_us"),
                                           ("runner", "fed_median_ms"), ("runner", "resident_median_ms"))]
        text = ["-" if v is None else f"{v:.1f}" for v in shown]
        print(f"{row['batch']:>5}  {row['kernels']:>7}  {row['modeled_us']:>10.1f}  {text[0]:>11}  "
              f"{text[1]:>13}  {text[2]:>10}  {text[3]:>11}  {row['check'].get('same_tokens', '-')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
