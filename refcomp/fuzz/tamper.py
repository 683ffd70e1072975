"""Hostile program files: every saved program the fuzzer checks is also edited as an attacker who
holds the user's key would edit it (the worst case), and loading the edit must either refuse it with
a ProgramFileError or give the very program that was saved: never another exception, never other code.
"""
from __future__ import annotations

import json
import random

from ..pipeline.load import load_program
from ..exec.saved import ProgramFileError, body_mac

# Text an attacker might put where a file holds code, a dim or an index.
HOSTILE = [
    '__import__("os").system("true")',
    "1000000*B",
    'x); system("true"); (',
    "-1",
    "B**B",
    "9" * 40,
    "[" * 50,
    "idiv(B, 0)",
    10**12,
    -1,
    None,
    [],
    {"tuple": []},
]


def _leaves(data, path=()):
    """(path, value) of every scalar in the file's body, iteratively."""
    stack = [(path, data)]
    while stack:
        here, value = stack.pop()
        if isinstance(value, dict):
            stack += [(here + (k,), v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(here + (k,), v) for k, v in enumerate(value)]
        else:
            yield here, value


def tampered_load(path: str, outputs, source: str, seed: int) -> str:
    """Edit one value of the file at random (seeded), sign it again and load it: 'refused' or
    'unchanged'; raises AssertionError if the edit loaded as a different program or broke anything."""
    rng = random.Random(seed)
    with open(path) as f:
        data = json.load(f)
    leaves = [(p, v) for p, v in _leaves(data) if p[0] not in ("format", "version", "mac", "explain")]
    where, _ = leaves[rng.randrange(len(leaves))]
    target = data
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = rng.choice(HOSTILE)
    data["mac"] = body_mac({k: v for k, v in data.items() if k not in ("format", "version", "mac")})
    with open(path, "w") as f:
        json.dump(data, f)
    try:
        loaded = load_program(path, outputs)
    except ProgramFileError:
        return "refused"
    except Exception as exc:  # the fuzzer's finding: any other exception is a bug
        raise AssertionError(f"a program file edited at {where} raised {type(exc).__name__}: {exc}") from exc
    if loaded.source != source:
        raise AssertionError(f"a program file edited at {where} loaded as another program")
    return "unchanged"
