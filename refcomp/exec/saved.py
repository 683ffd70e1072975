"""Program files: a compiled program as versioned, human-readable JSON, loaded without a search.

    {"format": "refcomp-program", "version": "0.1.0", "mac": "<HMAC-SHA256 of the rest>",
     "nodes": [...],          every node of the user's graph and of the compiled graph, sources first:
                              op, sources (node index and view stack), attrs, shape, dtype, user op
     "outputs": {...},        the user's outputs (their structure and edges): the reference and the
                              binding validator read these, so a loaded program refuses what it did
     "output_nodes": [...],   the nodes the compiled graph leaves the outputs in
     "schedule": {...},       the search's decisions and kernel parameters by node index (null for a
                              program compiled with search=False: one kernel per compute node)
     "kernels": [...],        for a reader: name, kind, user ops, launch, modeled cost, CUDA source
     "cost_bindings": {...}, "explain": "..."}

A file is untrusted input, so nothing in it becomes code: its dims are parsed by a grammar
(symbolic.dim_text), never evaluated, and its kernels are generated again from its graph and
schedule by this refcomp, then compared with the ones it lists, so an edited kernel or launch is
refused rather than built. The MAC (exec.cache.mac, a per-user key in the cache folder) says this
user's refcomp wrote the file; a file without it (edited, or saved by another user) is refused
unless the caller trusts its author, since its compiled graph could compute something other than
its user graph. See docs/reliability.md, "Threat model".
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import sympy

from ..errors import RefcompError
from ..ops.graph import toposort
from ..ops.primitives import OPS, Edge, Node, infer_shape
from ..ops.provenance import Origin
from ..ops.tensor import Tensor
from ..symbolic.dim_text import DimTextError, parse_dim
from ..symbolic.dims import dims_equal
from ..symbolic.view import View, ViewStack
from ..version import __version__
from .cache import mac

FORMAT = "refcomp-program"
MAX_FILE_BYTES = 1 << 30  # a program file past this is refused before it is read
MAX_VALUE_DEPTH = 8  # tuples within an attribute value (a nested pad spec: 3)


class ProgramFileError(RefcompError):
    """A program file that cannot be loaded: unreadable, edited, or from another refcomp version."""


def refcomp_version() -> str:
    """The package's own version (refcomp/version.py, kept equal to the distribution's): asking the
    installed distribution (importlib.metadata) slowed every cached compile and every load."""
    return __version__


# --- dims and values ---------------------------------------------------------------------------
def _dim(d) -> Any:
    return int(d) if isinstance(d, int) or (isinstance(d, sympy.Integer)) else _dim_text(d)


@functools.lru_cache(maxsize=4096)
def _dim_text(d: sympy.Expr) -> str:
    return str(d)  # printing is slow, and a graph repeats a few dims thousands of times


def _parse_dim(text, where: str, ratio: bool = False):
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str):
        raise ProgramFileError(f"{where}: a dim must be an int or an expression, got {str(text)[:80]}")
    value = _parsed(text, ratio)
    if isinstance(value, str):
        raise ProgramFileError(f"{where}: {value}")
    return value


@functools.lru_cache(maxsize=4096)
def _parsed(text: str, ratio: bool):
    """The dim `text` spells, or why it cannot be read (a file repeats a few dims thousands of times)."""
    try:
        return parse_dim(text, ratio)
    except (DimTextError, RefcompError) as exc:  # RefcompError: a name that is no dim name
        return f"cannot read the dim {text[:80]!r}: {exc}"


def _shape(shape, where: str) -> tuple:
    return tuple(_parse_dim(d, where) for d in shape)


def _value(v) -> Any:
    """An attribute value as JSON: tagged where JSON alone would lose the type."""
    if (
        v is None
        or isinstance(v, bool)
        or isinstance(v, str)
        or (isinstance(v, int) and not isinstance(v, sympy.Basic))
    ):
        return v  # None: an unsharded dim of an input's sharding
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, sympy.Basic):
        return {"dim": _dim(v)}
    if isinstance(v, (tuple, list)):
        return {"tuple": [_value(x) for x in v]}
    raise RefcompError(f"cannot save an attribute value of type {type(v).__name__}: {v!r}")


def _read_value(v, where: str, depth: int = 0) -> Any:
    if depth > MAX_VALUE_DEPTH:
        raise ProgramFileError(f"{where}: an attribute value nested over {MAX_VALUE_DEPTH} deep")
    if isinstance(v, dict) and len(v) == 1:
        (tag, inner), = v.items()
        if tag == "float":
            return float(inner)
        if tag == "dim":  # an attribute, such as a Constant's value, may be a ratio of dims (1/B)
            return _parse_dim(inner, where, ratio=True)
        if tag == "tuple" and isinstance(inner, list):
            return tuple(_read_value(x, where, depth + 1) for x in inner)
    if v is None or isinstance(v, (bool, str, int)):
        return v
    raise ProgramFileError(f"{where}: cannot read the attribute value {str(v)[:80]}")


def _views(views: ViewStack) -> list:
    return [
        {
            "shape": [_dim(d) for d in v.shape],
            "strides": [_dim(d) for d in v.strides],
            "offset": _dim(v.offset),
            "mask": None if v.mask is None else [[_dim(lo), _dim(hi)] for lo, hi in v.mask],
        }
        for v in views.views
    ]


_VIEW_KEYS = {"shape", "strides", "offset", "mask"}


def _read_views(views: list, where: str) -> ViewStack:
    if not isinstance(views, list):
        raise ProgramFileError(f"{where}: an edge's views are not a list")
    return ViewStack(tuple(_read_view(v, where) for v in views))


def _read_view(v, where: str) -> View:
    """One view, its strides and mask checked against its shape: a stride or a mask's (lo, hi) pair
    per dim (a file is untrusted input)."""
    if not isinstance(v, dict) or set(v) != _VIEW_KEYS:
        raise ProgramFileError(f"{where}: a view is not an object of {sorted(_VIEW_KEYS)}")
    shape, strides = _shape(v["shape"], where), _shape(v["strides"], where)
    if len(strides) != len(shape):
        raise ProgramFileError(f"{where}: a view of {len(shape)} dims has {len(strides)} strides")
    mask = v["mask"]
    if mask is not None:
        if not isinstance(mask, list) or len(mask) != len(shape):
            raise ProgramFileError(f"{where}: a view of {len(shape)} dims has a mask of another length")
        mask = tuple(_shape(r, where) for r in mask)
        if any(len(r) != 2 for r in mask):
            raise ProgramFileError(f"{where}: a view's mask holds a (lo, hi) pair per dim")
    return View(shape, strides, _parse_dim(v["offset"], where), mask)


# --- writing -----------------------------------------------------------------------------------
def graph_json(outputs, tensors, more_nodes=()) -> tuple[dict, dict[int, int]]:
    """The user's graph (and `more_nodes`, sources first) as JSON-ready data, and each node's index.
    Equal for structurally equal graphs built by the same user calls: the program cache's key."""
    nodes = toposort([t.node for t in tensors] + list(more_nodes))
    index = {n.id: k for k, n in enumerate(nodes)}
    edge = lambda e: [index[e.node.id], _views(e.views)]
    structure = (
        "dict" if isinstance(outputs, dict) else "list" if isinstance(outputs, (list, tuple)) else "tensor"
    )
    return {
        "nodes": [
            {
                "op": n.op.name,
                "srcs": [edge(s) for s in n.srcs],
                "attrs": {k: _value(v) for k, v in sorted(n.attrs.items())},
                "shape": [_dim(d) for d in n.shape],
                "dtype": n.dtype,
                "origin": None if n.origin is None else [n.origin.op, n.origin.where],
            }
            for n in nodes
        ],
        "outputs": {
            "structure": structure,
            "keys": [str(k) for k in outputs] if structure == "dict" else None,
            "edges": [edge(t.edge) for t in tensors],
        },
    }, index


def structure_json(outputs, tensors) -> dict:
    """The user's graph as `graph_json` writes it, less where each node was built: what two graphs
    must share for one's program to serve the other (load_program's check of its `outputs`)."""
    graph, _ = graph_json(outputs, tensors)
    for node in graph["nodes"]:
        node["origin"] = None
    return graph


def kernel_listing(kernel) -> dict:
    """What a file shows of a kernel, and what a loaded program's regenerated kernel must equal."""
    launch = kernel.launch
    return {"name": kernel.name, "kind": kernel.kind, "ops": list(kernel.ops),
            "launch": {"mode": launch.mode, "work": _dim(launch.work), "block": launch.block,
                       "extra": [_dim(d) for d in launch.extra]},
            "source": kernel.source.split("\n")}


def program_json(program) -> dict:
    """Everything a Program needs to run without search, as JSON-ready data (with its MAC)."""
    graph, index = graph_json(program.outputs, program.tensors, program.output_nodes)
    cost_fields = ("name", "kind", "bytes", "flops", "threads", "time_s", "l2_bytes")
    body = {
        **graph,
        "output_nodes": [index[n.id] for n in program.output_nodes],
        "schedule": None if program.schedule is None else program.schedule.indexed(index),
        "kernels": [
            {
                **kernel_listing(k),
                "cost": None if k.cost is None else {f: getattr(k.cost, f) for f in cost_fields},
            }
            for k in program.kernels
        ],
        "cost_bindings": dict(program.cost_bindings),
        "explain": program.explain(),
    }
    return {"format": FORMAT, "version": refcomp_version(), "mac": body_mac(body), **body}


def body_mac(body: dict) -> str:
    return mac(json.dumps(body, sort_keys=True, separators=(",", ":")))


def program_text(program) -> str:
    """A program file's text: JSON a person can read and diff, one line per node and per kernel
    field, a kernel's source one line per line of C. Each line goes through json's C encoder;
    `indent=` would force its pure-Python one, five times slower on a large program."""
    def lines(key, items, item=json.dumps):
        return f"{json.dumps(key)}: [\n" + ",\n".join(map(item, items)) + "\n]"

    def kernel(k: dict) -> str:
        head = json.dumps({f: v for f, v in k.items() if f != "source"})
        return head[:-1] + ', ' + lines("source", k["source"]) + "}"

    doc = program_json(program)
    parts = [
        lines(key, value, kernel if key == "kernels" else json.dumps)
        if isinstance(value, list) and value
        else f"{json.dumps(key)}: {json.dumps(value)}"
        for key, value in doc.items()
    ]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_program(program, path) -> None:
    text = program_text(program)
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise ProgramFileError(f"cannot write the program file {str(path)!r}: {exc}") from exc


# --- reading -----------------------------------------------------------------------------------
def read_program(path, trusted: bool = False) -> dict:
    """The checked contents of a program file; raises ProgramFileError naming the file and the fault.
    `trusted`: accept a file whose MAC is not this user's (its kernels are still regenerated)."""
    name = str(path)
    try:
        size = os.stat(path).st_size
        if size > MAX_FILE_BYTES:
            raise ProgramFileError(
                f"{name!r} is {size:,} bytes, more than a program file may be ({MAX_FILE_BYTES:,})"
            )
        data = json.loads(Path(path).read_text())
    except (
        OSError,
        UnicodeDecodeError,
        ValueError,
        RecursionError,
    ) as exc:  # ValueError: bad JSON, a 5,000-digit int
        raise ProgramFileError(
            f"cannot read the program file {name!r}: {type(exc).__name__}: {str(exc)[:200]}"
        ) from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProgramFileError(f"{name!r} is not a refcomp program file (no \"format\": \"{FORMAT}\")")
    if data.get("version") != refcomp_version():
        raise ProgramFileError(
            f"{name!r} was saved by refcomp {str(data.get('version'))[:40]}, and this is refcomp "
            f"{refcomp_version()}: compile the graph again and save it"
        )
    body = {k: v for k, v in data.items() if k not in ("format", "version", "mac")}
    if not trusted and data.get("mac") != body_mac(body):
        raise ProgramFileError(
            f"{name!r} does not carry this user's MAC: it was edited or damaged after it was saved, or "
            f"saved by another user or machine. If you trust its author, load it with "
            f"rc.load_program(path, trusted=True): its kernels are generated again from its graph "
            f"either way, but its compiled graph is taken on trust"
        )
    return data


def rebuild_parts(data: dict, name: str, read_schedule):
    """(outputs, output_nodes, schedule or None, cost bindings, explain text, kernel listings) from
    checked file data: every node rebuilt by its op's shape rule and checked against the file.
    `read_schedule(spec, node_id, name)` makes the schedule (the search's type) of the file's
    schedule `spec`, where `node_id(i)` is the id of the file's node i, checked."""
    try:
        return _rebuild_parts(data, name, read_schedule)
    except ProgramFileError:
        raise
    except (RefcompError, KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise ProgramFileError(
            f"{name!r}: a malformed program file ({type(exc).__name__}: {str(exc)[:200]})"
        ) from exc


def _rebuild_parts(data: dict, name: str, read_schedule):
    nodes: list[Node] = []
    for k, spec in enumerate(data["nodes"]):
        where = f"{name!r} node {k} ({str(spec['op'])[:40]})"
        if spec["op"] not in OPS:
            raise ProgramFileError(f"{where}: unknown op")
        srcs = tuple(Edge(nodes[_index(i, k)], _read_views(v, where)) for i, v in spec["srcs"])
        attrs = {str(key): _read_value(v, where) for key, v in spec["attrs"].items()}
        _check_attrs(attrs, where)
        op = OPS[spec["op"]]
        origin = None if spec["origin"] is None else Origin(*(str(part) for part in spec["origin"]))
        node = Node(op, srcs, attrs, infer_shape(op, srcs, attrs), str(spec["dtype"]), origin=origin)
        stored = _shape(spec["shape"], where)
        if len(stored) != len(node.shape) or not all(dims_equal(a, b) for a, b in zip(stored, node.shape)):
            raise ProgramFileError(
                f"{where}: its shape {str(spec['shape'])[:80]} does not follow from its sources"
            )
        nodes.append(node)
    out = data["outputs"]
    tensors = [Tensor(Edge(nodes[_index(i, len(nodes))], _read_views(v, f"{name!r} output {j}")))
               for j, (i, v) in enumerate(out["edges"])]
    structure = out["structure"]
    outputs = (
        tensors[0]
        if structure == "tensor" and len(tensors) == 1
        else dict(zip(map(str, out["keys"]), tensors))
        if structure == "dict" and len(out["keys"]) == len(tensors)
        else tensors
        if structure == "list"
        else None
    )
    if outputs is None:
        raise ProgramFileError(
            f"{name!r}: its outputs' structure {str(structure)[:40]} does not fit its {len(tensors)} edges"
        )
    node_id = lambda i: nodes[_index(i, len(nodes))].id  # noqa: E731
    schedule = None if data["schedule"] is None else read_schedule(data["schedule"], node_id, name)
    bindings = {str(k): v for k, v in data["cost_bindings"].items()}
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62 for v in bindings.values()
    ):
        raise ProgramFileError(f"{name!r}: its cost bindings must be whole numbers")
    explained = data["explain"]
    if not isinstance(explained, str):
        raise ProgramFileError(f"{name!r}: its explanation is not text")
    output_nodes = [nodes[_index(i, len(nodes))] for i in data["output_nodes"]]
    return outputs, output_nodes, schedule, bindings, explained, list(data["kernels"])


def _is_dim(v) -> bool:
    return isinstance(v, (int, float, sympy.Expr)) and not isinstance(v, bool)


# Attributes whose values become numbers or dims: only numbers and parsed dims may stand there.
ATTR_CHECKS = {
    "value": _is_dim,
    "axis": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "shape": lambda v: isinstance(v, tuple) and all(_is_dim(d) and not isinstance(d, float) for d in v),
}


def _check_attrs(attrs: dict, where: str) -> None:
    for key, check in ATTR_CHECKS.items():
        if key in attrs and not check(attrs[key]):
            raise ProgramFileError(
                f"{where}: its attribute {key}={str(attrs[key])[:80]} is not a number or dim"
            )


def _index(i, below: int) -> int:
    """A node index from a file: an int naming an earlier node (so the graph has no cycle)."""
    if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < below:
        raise ProgramFileError(f"node index {str(i)[:40]} does not name an earlier node")
    return i

