"""The compiled-program cache: a searched program, saved once, is loaded by the next process.

Search and lowering take seconds on a real model; loading their result takes a fraction of that.
The key is the user's graph, written canonically (exec.saved.graph_json: ops, attributes, views,
input names, the user calls that built each node), with the binding the search priced at, the cost
model's device profile, and refcomp's version and source digest, so editing refcomp never serves a
stale program. Files live in `$REFCOMP_PROGRAM_CACHE_DIR`, else in the kernel cache's `programs/`
folder; a damaged file counts as a miss and is written again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, Optional

from ..ops.graph import flatten_outputs
from ..exec.cache import cache_dir, cache_key, write_atomically
from ..exec.program import Program
from .load import load_program
from ..exec.saved import ProgramFileError, graph_json, program_text, refcomp_version

ENV = "REFCOMP_PROGRAM_CACHE_DIR"
_PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """sha256 of refcomp's own code and templates: a program cached by other code is not reused."""
    h = hashlib.sha256()
    for path in sorted(
        p for p in _PACKAGE.rglob("*") if p.suffix in (".py", ".j2") and "__pycache__" not in p.parts
    ):
        h.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def program_path(outputs, dims_hint: Mapping[str, int], profile) -> Path:
    tensors, _ = flatten_outputs(outputs)
    graph, _ = graph_json(outputs, tensors)
    key = cache_key(refcomp_version(), source_digest(), repr(profile), json.dumps(graph, sort_keys=True),
                    json.dumps(sorted(dims_hint.items())))
    directory = cache_dir(root=os.environ.get(ENV)) if os.environ.get(ENV) else cache_dir("programs")
    return directory / f"{key[:32]}.json"


def load_cached(outputs, path: Path) -> Optional[Program]:
    """The cached program for these outputs (run against the caller's own tensors), or None."""
    if not path.is_file():
        return None
    try:
        return load_program(path, outputs)
    except ProgramFileError:
        return None


def store(program: Program, path: Path) -> None:
    write_atomically(path, program_text(program))
