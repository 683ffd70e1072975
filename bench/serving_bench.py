"""Serving: tokens per second on the emulator beside transformers on torch CPU, and the modeled
decode step of GPT-2 small against the HBM roofline.

1. A small GPT-2 (4 layers, d=256, GPT-2's vocabulary), random weights shared by both sides:
   refcomp's Engine on the emulator (greedy, prompts of 16 tokens, 32 new tokens) at batch 1 and 8,
   and transformers' `generate(do_sample=False)` on torch CPU in the same run. The compiles happen
   in a warm-up call and are reported apart.
2. GPT-2 small (124M: 12 layers, d=768, vocab 50,257) decode program at context 1,024 (64 pages of
   16), batch 1 and 32, under the H200 cost model: modeled time, kernels (launches per layer), and
   the roofline (weights + the context's K and V bytes, / 4.8 TB/s) with its parts.

3. The scheduler (issue 31) on the emulator: 1, 8 and 32 clients in a closed loop, continuous
   batching on and off, the prefix cache on and off with a shared system prompt; throughput, time
   to first token, and the modeled GPU time of the same steps (bench/serving_workload.py).

    python bench/serving_bench.py [--skip-emulator] [--skip-model] [--skip-scheduler] [--new 32]

Writes bench/results/serving.json; a skipped part keeps its rows from the file's last run (with that
run's revision and date beside them).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.results_file import write_results  # noqa: E402

HBM_PEAK = 4.8e12  # bytes/s, the H200's HBM3e peak (the roofline's)


def emulator_rows(new: int) -> list:
    import torch
    import transformers
    from refcomp.serving.engine import Engine
    from refcomp.serving.models import from_transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=1024, eos_token_id=None,
                                  bos_token_id=None)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    model = from_transformers(cfg, hf.state_dict())
    rows = []
    for batch in (1, 8):
        prompts = [[(17 * b + 3 * t) % cfg.vocab_size for t in range(16)] for b in range(batch)]
        engine = Engine(model, pages=16 * batch + 8, page_size=16, backend="emulator")
        started = time.perf_counter()
        engine.generate(prompts[:1], 2)
        warm = time.perf_counter() - started
        engine.stats.update(prefill_s=0.0, decode_s=0.0, decode_steps=0, tokens=0)
        started = time.perf_counter()
        ours = engine.generate(prompts, new, ignore_eos=True)
        seconds = time.perf_counter() - started
        with torch.no_grad():  # the mask says every token is real (a prompt may hold the pad id)
            ids = torch.tensor(prompts)
            mask = torch.ones_like(ids)
            hf.generate(
                ids, attention_mask=mask, max_new_tokens=2, do_sample=False, pad_token_id=0
            )  # warm-up
            started = time.perf_counter()
            theirs = hf.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
            torch_s = time.perf_counter() - started
        same = [o == t[16:].tolist() for o, t in zip(ours, theirs)]
        s = engine.stats
        row = {
            "batch": batch,
            "new_tokens": new,
            "emulator_tokens_per_s": batch * new / seconds,
            "emulator_decode_tokens_per_s": s["decode_steps"] * batch / s["decode_s"],
            "emulator_prefill_s": s["prefill_s"],
            "warmup_with_compiles_s": warm,
            "compiles": engine.compiles,
            "torch_cpu_tokens_per_s": batch * new / torch_s,
            "torch_threads": torch.get_num_threads(),
            "same_tokens_as_transformers": all(same),
        }
        print(
            f"batch {batch}: emulator {row['emulator_tokens_per_s']:.1f} tok/s (decode "
            f"{row['emulator_decode_tokens_per_s']:.1f}), "
            f"torch CPU {row['torch_cpu_tokens_per_s']:.1f} tok/s; "
            f"same tokens: {all(same)}; warm-up with compiles {warm:.1f} s"
        )
        rows.append(row)
    return rows


def _reads_pages(kernel) -> bool:
    """Whether a kernel writes the pool (Scatter), gathers its pages, reads the gathered pages, or looks
    the pages up itself (a Gather of the pool fused into it)."""
    def pages(n):
        return n.op.name == "Scatter" or (n.op.name == "Gather" and n.srcs[0].node.op.name == "Scatter")
    return pages(kernel.output) or any(pages(n) for n in kernel.reads + kernel.nodes)


def model_rows(context: int = 1024, page_size: int = 16) -> list:
    import refcomp as rc
    from refcomp.search.cost import H200
    from refcomp.serving.kv_cache import PagedKVPool
    from refcomp.serving.models import random_gpt2
    from refcomp.serving.programs import step_graph
    from refcomp.serving.sampling import greedy_graph
    layers, d, heads, vocab, positions = 12, 768, 12, 50257, 1024
    model = random_gpt2(layers, d, heads, vocab, positions)
    weight_bytes = sum(a.nbytes for a in model.weights.values())
    rows = []
    for batch in (1, 32):
        pages = batch * context // page_size
        pool = PagedKVPool(pages, page_size, layers, heads, d // heads)
        outputs = step_graph(model, pool, 1, greedy_graph)
        started = time.perf_counter()
        prog = rc.compile(outputs, dims_hint={"B": batch, "NP": context // page_size}, cache=False)
        compile_s = time.perf_counter() - started
        kv_bytes = batch * context * layers * 2 * d * 4
        costs = [k.cost for k in prog.kernels]
        launches = len(costs) * H200.launch_s
        modeled = sum(c.time_s for c in costs)
        kv_kernels = [c for k, c in zip(prog.kernels, costs) if _reads_pages(k)]
        roofline = (weight_bytes + kv_bytes) / HBM_PEAK
        row = {
            "batch": batch,
            "context": context,
            "kernels": len(costs),
            "kernels_per_layer": (len(costs) - 2) / layers,
            "modeled_us": modeled * 1e6,
            "roofline_us": roofline * 1e6,
            "ratio": modeled / roofline,
            "parts": {
                "launches_us": launches * 1e6,
                "weights_roofline_us": weight_bytes / HBM_PEAK * 1e6,
                "kv_roofline_us": kv_bytes / HBM_PEAK * 1e6,
                "kv_kernels": len(kv_kernels),
                "kv_kernels_modeled_us": sum(c.time_s for c in kv_kernels) * 1e6,
            },
            "modeled_bytes": sum(c.bytes for c in costs),
            "weights_bytes": weight_bytes,
            "kv_bytes": kv_bytes,
            "compile_s": compile_s,
            "cost_table": prog.cost_summary(),
        }
        print(
            f"GPT-2 small decode, batch {batch}, context {context}: modeled {row['modeled_us']:.1f} us, "
            f"roofline {row['roofline_us']:.1f} us (x{row['ratio']:.2f}); {len(costs)} kernels, launches "
            f"{launches * 1e6:.0f} us; weights {weight_bytes / HBM_PEAK * 1e6:.1f} us, "
            f"KV {kv_bytes / HBM_PEAK * 1e6:.1f} us"
        )
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skip-emulator", action="store_true")
    p.add_argument("--skip-model", action="store_true")
    p.add_argument("--skip-scheduler", action="store_true")
    p.add_argument("--new", type=int, default=32)
    args = p.parse_args()
    from bench.serving_workload import scheduler_rows
    path = ROOT / "bench" / "results" / "serving.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    kept = {}

    def part(name, skip, rows):
        """The part's new rows, or the last run's when skipped (and where they came from)."""
        if not skip:
            return rows()
        if name in old:
            kept[name] = old.get("kept", {}).get(name) or {k: old.get(k) for k in ("generated", "revision")}
        return old.get(name, [])

    load, started = os.getloadavg(), time.perf_counter()
    fields = {
        "emulator": part("emulator", args.skip_emulator, lambda: emulator_rows(args.new)),
        "modeled_decode": part("modeled_decode", args.skip_model, model_rows),
        "scheduler": part("scheduler", args.skip_scheduler, scheduler_rows),
    }
    np.set_printoptions(precision=3)
    write_results(path, "bench/serving_bench.py", load, time.perf_counter() - started, **fields, kept=kept)


if __name__ == "__main__":
    main()
