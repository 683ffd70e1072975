"""GPT-2 small (124M parameters, 12 layers, random weights) through rc.torch, end to end.

transformers' GPT2LMHeadModel from `GPT2Config()` (eager attention: its SDPA path does not export
with a dynamic batch), exported once with a dynamic batch B in [1, 8] and sequence T in [2, 1024].
Measured: torch's own time (torch.export.export(...).run_decompositions()), refcomp's import of the
Core ATen program, rc.compile with the search on at B=1 T=128 (program cache off; the search's own
seconds beside it), the graph's nodes, the kernels and kernels per transformer layer, the modeled
time of the searched program at B=1 T=128 (H200 cost model, SearchResult.time_s), and the emulator's
logits at B=1 T=8 against PyTorch eager (max abs difference; the first run builds the kernels with g++).
`--profile` also records where one more compile and one more import spend their time (cProfile,
by cumulative time).

    python bench/torch_export_bench.py [--layers 12] [--profile]
        # prints a table, writes bench/results/torch_export.json

Targets (issue 29): import + compile (refcomp's time beyond torch.export's) at most 5 s; the
emulator's logits within 1e-4 of PyTorch's.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from results_file import write_results  # noqa: E402

HINT = {"B": 1, "T": 128}
TARGETS = {"import_plus_compile_s": 5.0, "logits_max_abs_diff": 1e-4}


def gpt2(layers: int):
    """GPT-2 small's LM head model returning logits only (the wrapper drops the output dataclass)."""
    import torch
    import transformers

    class Logits(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, input_ids):
            return self.net(input_ids=input_ids).logits

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, use_cache=False, attn_implementation="eager")
    return Logits(transformers.GPT2LMHeadModel(config)).eval()


def _profile(call, top: int = 30) -> list[str]:
    """The heaviest functions of one call by cumulative time, as pstats prints them."""
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(top)
    return [" ".join(line.split()) for line in text.getvalue().splitlines() if "(" in line and "/" in line]


def measure(layers: int, profile: bool) -> dict:
    import torch
    import refcomp as rc
    from refcomp.frontends.torch_export import export_program, imported
    from refcomp.ops.graph import toposort

    net = gpt2(layers)
    entry = {"model": "GPT2LMHeadModel(GPT2Config())", "layers": layers,
             "parameters": sum(p.numel() for p in net.parameters()), "dims_hint": HINT, "targets": TARGETS}
    Dim = torch.export.Dim
    axes = {0: Dim("B", min=1, max=8), 1: Dim("T", min=2, max=1024)}
    example = torch.randint(0, 50257, (2, 8), generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    ep, names = export_program(net, (example,), dynamic_shapes={"input_ids": axes})
    entry["torch_export_s"] = time.perf_counter() - start
    start = time.perf_counter()
    m = rc.torch.TorchModel(imported(ep, names))
    entry["import_s"] = time.perf_counter() - start
    entry["nodes"] = len(toposort([t.node for t in m.outputs.values()]))
    print(
        f"  export {entry['torch_export_s']:.1f} s, import {entry['import_s']:.1f} s, {entry['nodes']} nodes",
        file=sys.stderr,
        flush=True,
    )

    start = time.perf_counter()
    prog = rc.compile(m.outputs, dims_hint=HINT, cache=False)
    entry["compile_s"] = time.perf_counter() - start
    entry.update(
        search_s=prog.search.seconds,
        search_complete=prog.search.complete,
        kernels=len(prog.kernels),
        modeled_s_at_hint=prog.search.time_s,
    )

    def in_layer(
        op: str, i: int
    ) -> bool:  # a block's own ops (its residual adds) are named net.transformer.h.i
        return op == f"net.transformer.h.{i}" or op.startswith(f"net.transformer.h.{i}.")

    per_layer = [sum(any(in_layer(op, i) for op in k.ops) for k in prog.kernels) for i in range(layers)]
    entry["kernels_per_layer"] = per_layer
    entry["kernels_outside_layers"] = sum(not any(op.startswith("net.transformer.h.") for op in k.ops)
                                          for k in prog.kernels)
    entry["import_plus_compile_s"] = entry["import_s"] + entry["compile_s"]
    print(
        f"  compile {entry['compile_s']:.1f} s (search {entry['search_s']:.1f} s), "
        f"{len(prog.kernels)} kernels",
        file=sys.stderr,
        flush=True,
    )

    m.__dict__.setdefault("_programs", {})[True] = prog  # m.run serves every binding with this program
    ids = torch.randint(0, 50257, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = net(ids).numpy()
    start = time.perf_counter()
    got = m.run({"input_ids": ids}, backend="emulator")["output"]
    entry["emulator_first_run_s"] = time.perf_counter() - start
    start = time.perf_counter()
    m.run({"input_ids": ids}, backend="emulator")
    entry["emulator_warm_run_s"] = time.perf_counter() - start
    entry["logits_max_abs_diff"] = float(np.abs(got - want).max())
    entry["logits_max_abs"] = float(np.abs(want).max())
    entry["meets"] = {key: entry[key] <= limit for key, limit in TARGETS.items()}
    if profile:
        entry["profile_top"] = _profile(lambda: rc.compile(m.outputs, dims_hint=HINT, cache=False))
        entry["import_profile_top"] = _profile(lambda: imported(ep, names), 20)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=12, help="transformer layers (GPT-2 small has 12)")
    parser.add_argument("--profile", action="store_true", help="also profile one more compile and import")
    args = parser.parse_args()
    load_start, start = os.getloadavg(), time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["REFCOMP_CACHE_DIR"] = cache  # the first emulator run builds every kernel
        r = measure(args.layers, args.profile)
    print(
        f"{'layers':>6}{'nodes':>7}{'export s':>10}{'import s':>10}{'compile s':>11}{'search s':>10}"
        f"{'kernels':>9}{'per layer':>11}{'modeled us':>12}{'emu 1st s':>11}{'logits diff':>13}"
    )
    print(
        f"{r['layers']:>6}{r['nodes']:>7}{r['torch_export_s']:>10.2f}{r['import_s']:>10.2f}{r['compile_s']:>11.2f}"
        f"{r['search_s']:>10.2f}{r['kernels']:>9}{max(r['kernels_per_layer']):>11}"
        f"{r['modeled_s_at_hint'] * 1e6:>12.1f}"
        f"{r['emulator_first_run_s']:>11.2f}{r['logits_max_abs_diff']:>13.2e}"
    )
    print(
        "targets: " + ", ".join(f"{k} <= {v} {'yes' if r['meets'][k] else 'NO'}" for k, v in TARGETS.items())
    )
    if r.get("profile_top"):
        print("\n".join(["compile profile (cumulative):"] + r["profile_top"][:15]))
        print("\n".join(["import profile (cumulative):"] + r["import_profile_top"][:12]))
    write_results(ROOT / "bench" / "results" / "torch_export.json", "bench/torch_export_bench.py", load_start,
                  time.perf_counter() - start, gpt2=r)


if __name__ == "__main__":
    main()
