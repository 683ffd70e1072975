"""Serving: the paged KV cache (kv_cache.py), the programs and engine built on it, and the
continuous-batching scheduler (scheduler.py) with its prefix cache (prefix_cache.py).

Names load on first use (PEP 562), as the package's own do, so `import refcomp.serving` costs nothing
until a name is asked for."""
from __future__ import annotations

import importlib

# name -> the submodule that defines it
_ATTRIBUTES = {
    **dict.fromkeys(
        ("PagedKVPool", "gather_pages", "gather_slots", "write_slots", "context_mask"), ".kv_cache"
    ),
    **dict.fromkeys(("Engine", "EngineError"), ".engine"),
    **dict.fromkeys(("Scheduler", "Request"), ".scheduler"),
    **dict.fromkeys(("PrefixCache",), ".prefix_cache"),
    **dict.fromkeys(("megatron_shardings",), ".parallel"),
    **dict.fromkeys(("from_transformers", "random_gpt2", "ModelError"), ".models"),
    **dict.fromkeys(("step_graph", "paged_attention", "full_graph"), ".programs"),
    **dict.fromkeys(("Sampling", "SamplingError", "sampling_graph", "greedy_graph"), ".sampling"),
}

__all__ = sorted(_ATTRIBUTES)


def __getattr__(name: str):
    if name not in _ATTRIBUTES:
        raise AttributeError(f"module 'refcomp.serving' has no attribute {name!r}")
    value = getattr(importlib.import_module(_ATTRIBUTES[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_ATTRIBUTES))
