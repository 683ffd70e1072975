"""A fingerprint of everything the search and code generation decide, to show a speed-up changed nothing.

    PYTHONPATH=. python scripts/fingerprint.py [--fuzz 60] [--out fp.json]

Compiles (search on, no program cache) every golden case without a hint and at each of its bindings,
the GPT-2 block at two bindings, a three-block stack, the MLP at two batches, the small CNN and
`--fuzz` graphs of the fuzzer (seed 0), and hashes per program each kernel's source, launch and
modeled cost and the program's `explain()`. It prints one digest over all of them (and writes the
per-program digests with --out): two revisions that print the same digest compiled every program to
the same bytes. Compare under another PYTHONHASHSEED too: output must not depend on it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import refcomp as rc  # noqa: E402
from refcomp import golden  # noqa: E402
from refcomp.fuzz.generator import generate  # noqa: E402


def programs(fuzz: int):
    """(label, outputs, dims_hint) for each program fingerprinted."""
    from search_targets_bench import GRAPHS, gpt2_graph

    for case in golden.load_cases():
        yield case.name, case.build, None
        for binding in case.bindings:
            if binding:
                yield f"{case.name}@{binding}", case.build, dict(binding)
    yield "gpt2@B=8,T=128", lambda: GRAPHS["gpt2"]()[0], {"B": 8, "T": 128}
    yield "gpt2@B=1,T=64", lambda: GRAPHS["gpt2"]()[0], {"B": 1, "T": 64}
    yield "gpt2x3@B=1,T=64", lambda: gpt2_graph(3)[0], {"B": 1, "T": 64}
    for name in ("mlp_b64", "mlp_b1024", "cnn"):
        yield name, lambda name=name: GRAPHS[name]()[0], None
    for index in range(fuzz):
        yield f"fuzz0:{index}", lambda index=index: generate(0, index).build(), None


def digest(prog) -> str:
    h = hashlib.sha256()
    for k in prog.kernels:
        h.update(k.name.encode() + b"\0" + k.source.encode() + b"\0" + str(k.launch).encode() + b"\0")
        h.update(repr((k.cost.bytes, k.cost.flops, k.cost.threads, k.cost.time_s, k.cost.l2_bytes)).encode())
    h.update(
        re.sub(r" states in [0-9.]+ s", " states", prog.explain()).encode()
    )  # the search's wall time varies
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz", type=int, default=60, help="fuzz graphs (seed 0) to include")
    parser.add_argument("--out", help="write {program: digest} here")
    args = parser.parse_args()
    started = time.perf_counter()
    digests = {}
    for label, build, hint in programs(args.fuzz):
        try:
            digests[label] = digest(rc.compile(build(), dims_hint=hint, cache=False))
        except rc.RefcompError as exc:  # a fuzz graph the compiler refuses: the refusal is the fingerprint
            digests[label] = f"error: {type(exc).__name__}: {exc}"
    total = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(digests, f, indent=1, sort_keys=True)
    print(f"{len(digests)} programs, {time.perf_counter() - started:.1f} s, fingerprint {total[:16]}")


if __name__ == "__main__":
    main()
