"""Program files: a compiled program as versioned, human-readable JSON, loaded without a search.

    {"format": "refcomp-program", "version": "0.1.0", "signature": "<sha256 of the rest>",
     "nodes": [...],          every node of the user's graph and of the compiled graph, sources first:
                              op, sources (node index and view stack), attrs, shape, dtype, user op
     "outputs": {...},        the user's outputs (their structure and edges): the reference and the
                              binding validator read these, so a loaded program refuses what it did
     "output_nodes": [...],   the nodes the kernels leave the outputs in
     "kernels": [...],        name, kind, user ops, the nodes it writes, reads and computes (the memory
                              plan is made from these at each binding), launch geometry, parameters,
                              modeled cost, and the CUDA source as a list of lines
     "cost_bindings": {...}, "explain": "..."}

Dims are written as SymPy's text (`idiv(T + 1, 2)`) and parsed back with refcomp's own symbols and
functions (SymPy may regroup a parsed dim; its value is the same, and a loaded program only ever
evaluates dims, never prints them into code again). The
signature covers everything else, so a file edited by hand (or truncated) is refused, as is a file
from another refcomp version (its kernels may rely on conventions this version does not share).
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import sympy

from ..codegen.abi import KernelSignature, Param
from ..codegen.kernels import Kernel, Launch
from ..errors import RefcompError
from ..ops.graph import toposort
from ..ops.primitives import OPS, Edge, Node, infer_shape
from ..ops.provenance import Origin
from ..ops.tensor import Tensor
from ..search.cost import KernelCost
from ..symbolic.dims import dims_equal, idiv, imod, symbol
from ..symbolic.view import View, ViewStack

FORMAT = "refcomp-program"


class ProgramFileError(RefcompError):
    """A program file that cannot be loaded: unreadable, edited, or from another refcomp version."""


def refcomp_version() -> str:
    try:
        return metadata.version("refcomp")
    except metadata.PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


# --- dims and values ---------------------------------------------------------------------------
def _dim(d) -> Any:
    return int(d) if isinstance(d, int) or (isinstance(d, sympy.Integer)) else _dim_text(d)


@functools.lru_cache(maxsize=4096)
def _dim_text(d: sympy.Expr) -> str:
    return str(d)  # printing is slow, and a graph repeats a few dims thousands of times


_NAME = re.compile(r"[A-Za-z_]\w*")
_FUNCTIONS = {"idiv": idiv, "imod": imod}


def _parse_dim(text, where: str):
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str):
        raise ProgramFileError(f"{where}: a dim must be an int or an expression, got {text!r}")
    value = _parsed(text)
    if isinstance(value, str):
        raise ProgramFileError(f"{where}: {value}")
    return value


@functools.lru_cache(maxsize=4096)
def _parsed(text: str):
    """The dim `text` names, or why it cannot be read (parsing is slow; a file repeats few dims)."""
    names = {n: _FUNCTIONS.get(n) or symbol(n) for n in _NAME.findall(text)
             if n in _FUNCTIONS or not hasattr(sympy.functions, n)}  # Max, floor: SymPy's own
    try:
        value = sympy.sympify(text, locals=names)
    except (sympy.SympifyError, SyntaxError, TypeError, AttributeError) as exc:
        return f"cannot read the dim {text!r} ({type(exc).__name__})"
    if not isinstance(value, sympy.Expr):
        return f"the dim {text!r} is not an expression"
    return int(value) if value.is_Integer else value  # equal in value; SymPy may regroup it (3*(a + 1) -> 3*a + 3)


def _shape(shape, where: str) -> tuple:
    return tuple(_parse_dim(d, where) for d in shape)


def _value(v) -> Any:
    """An attribute value as JSON: tagged where JSON alone would lose the type."""
    if v is None or isinstance(v, bool) or isinstance(v, str) or (isinstance(v, int) and not isinstance(v, sympy.Basic)):
        return v  # None: an unsharded dim of an input's sharding
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, sympy.Basic):
        return {"dim": _dim(v)}
    if isinstance(v, (tuple, list)):
        return {"tuple": [_value(x) for x in v]}
    raise RefcompError(f"cannot save an attribute value of type {type(v).__name__}: {v!r}")


def _read_value(v, where: str) -> Any:
    if isinstance(v, dict) and len(v) == 1:
        (tag, inner), = v.items()
        if tag == "float":
            return float(inner)
        if tag == "dim":
            return _parse_dim(inner, where)
        if tag == "tuple":
            return tuple(_read_value(x, where) for x in inner)
    if v is None or isinstance(v, (bool, str, int)):
        return v
    raise ProgramFileError(f"{where}: cannot read the attribute value {v!r}")


def _views(views: ViewStack) -> list:
    return [{"shape": [_dim(d) for d in v.shape], "strides": [_dim(d) for d in v.strides], "offset": _dim(v.offset),
             "mask": None if v.mask is None else [[_dim(lo), _dim(hi)] for lo, hi in v.mask]} for v in views.views]


def _read_views(views: list, where: str) -> ViewStack:
    return ViewStack(tuple(View(_shape(v["shape"], where), _shape(v["strides"], where), _parse_dim(v["offset"], where),
                                None if v["mask"] is None else tuple(_shape(r, where) for r in v["mask"]))
                           for v in views))


# --- writing -----------------------------------------------------------------------------------
def graph_json(outputs, tensors, more_nodes=()) -> tuple[dict, dict[int, int]]:
    """The user's graph (and `more_nodes`, sources first) as JSON-ready data, and each node's index.
    Equal for structurally equal graphs built by the same user calls: the program cache's key."""
    nodes = toposort([t.node for t in tensors] + list(more_nodes))
    index = {n.id: k for k, n in enumerate(nodes)}
    edge = lambda e: [index[e.node.id], _views(e.views)]
    structure = "dict" if isinstance(outputs, dict) else "list" if isinstance(outputs, (list, tuple)) else "tensor"
    return {
        "nodes": [{"op": n.op.name, "srcs": [edge(s) for s in n.srcs],
                   "attrs": {k: _value(v) for k, v in sorted(n.attrs.items())}, "shape": [_dim(d) for d in n.shape],
                   "dtype": n.dtype, "origin": None if n.origin is None else [n.origin.op, n.origin.where]} for n in nodes],
        "outputs": {"structure": structure, "keys": [str(k) for k in outputs] if structure == "dict" else None,
                    "edges": [edge(t.edge) for t in tensors]},
    }, index


def program_json(program) -> dict:
    """Everything a Program needs to run without search, as JSON-ready data (signed)."""
    graph, index = graph_json(program.outputs, program.tensors, program.output_nodes)
    body = {
        **graph,
        "output_nodes": [index[n.id] for n in program.output_nodes],
        "kernels": [{"name": k.name, "kind": k.kind, "ops": list(k.ops), "writes": index[k.output.id],
                     "reads": [index[n.id] for n in k.reads], "computes": [index[n.id] for n in k.nodes],
                     "launch": {"mode": k.launch.mode, "work": _dim(k.launch.work), "block": k.launch.block,
                                "extra": [_dim(d) for d in k.launch.extra]},
                     "params": [[p.ident, p.ctype] for p in k.signature.params], "uses_barrier": k.signature.uses_barrier,
                     "cost": None if k.cost is None else {f: getattr(k.cost, f) for f in ("name", "kind", "bytes", "flops", "threads", "time_s", "l2_bytes")},
                     "source": k.source.split("\n")} for k in program.kernels],
        "cost_bindings": dict(program.cost_bindings),
        "explain": program.explain(),
    }
    return {"format": FORMAT, "version": refcomp_version(), "signature": _signature(body), **body}


def _signature(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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
    parts = [lines(key, value, kernel if key == "kernels" else json.dumps) if isinstance(value, list) and value
             else f"{json.dumps(key)}: {json.dumps(value)}" for key, value in doc.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_program(program, path) -> None:
    text = program_text(program)
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise ProgramFileError(f"cannot write the program file {str(path)!r}: {exc}") from exc


# --- reading -----------------------------------------------------------------------------------
def read_program(path) -> dict:
    """The checked contents of a program file; raises ProgramFileError naming the file and the fault."""
    name = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProgramFileError(f"cannot read the program file {name!r}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ProgramFileError(f"{name!r} is not a refcomp program file (no \"format\": \"{FORMAT}\")")
    if data.get("version") != refcomp_version():
        raise ProgramFileError(f"{name!r} was saved by refcomp {data.get('version')}, and this is refcomp {refcomp_version()}: "
                               f"compile the graph again and save it")
    body = {k: v for k, v in data.items() if k not in ("format", "version", "signature")}
    if data.get("signature") != _signature(body):
        raise ProgramFileError(f"{name!r} does not match its signature: it was edited or damaged after it was saved")
    return data


def rebuild_parts(data: dict, name: str):
    """(outputs, kernels, output_nodes, costs, cost_bindings, explain text) from checked file data."""
    nodes: list[Node] = []
    try:
        for k, spec in enumerate(data["nodes"]):
            where = f"{name!r} node {k} ({spec['op']})"
            if spec["op"] not in OPS:
                raise ProgramFileError(f"{where}: unknown op")
            srcs = tuple(Edge(nodes[i], _read_views(v, where)) for i, v in spec["srcs"])
            attrs = {key: _read_value(v, where) for key, v in spec["attrs"].items()}
            op = OPS[spec["op"]]
            node = Node(op, srcs, attrs, infer_shape(op, srcs, attrs), spec["dtype"],
                        origin=None if spec["origin"] is None else Origin(*spec["origin"]))
            stored = _shape(spec["shape"], where)
            if len(stored) != len(node.shape) or not all(dims_equal(a, b) for a, b in zip(stored, node.shape)):
                raise ProgramFileError(f"{where}: its shape {spec['shape']} does not follow from its sources")
            nodes.append(node)
        out = data["outputs"]
        tensors = [Tensor(Edge(nodes[i], _read_views(v, f"{name!r} output {j}"))) for j, (i, v) in enumerate(out["edges"])]
        outputs = (tensors[0] if out["structure"] == "tensor" else dict(zip(out["keys"], tensors)) if out["structure"] == "dict"
                   else tensors)
        kernels = []
        for spec in data["kernels"]:
            where = f"{name!r} kernel {spec['name']}"
            launch = spec["launch"]
            signature = KernelSignature(spec["name"], tuple(Param(i, c) for i, c in spec["params"]), spec["uses_barrier"])
            cost = None if spec["cost"] is None else KernelCost(**spec["cost"])
            kernels.append(Kernel(spec["name"], spec["kind"], nodes[spec["writes"]], tuple(nodes[i] for i in spec["computes"]),
                                  tuple(nodes[i] for i in spec["reads"]), signature, "\n".join(spec["source"]),
                                  Launch(launch["mode"], _parse_dim(launch["work"], where), launch["block"],
                                         _shape(launch["extra"], where)), tuple(spec["ops"]), cost))
        costs = [k.cost for k in kernels] if all(k.cost is not None for k in kernels) else None
        return (outputs, kernels, [nodes[i] for i in data["output_nodes"]], costs, data["cost_bindings"], data["explain"])
    except (KeyError, IndexError, TypeError, ValueError, AssertionError) as exc:
        raise ProgramFileError(f"{name!r}: a malformed program file ({type(exc).__name__}: {exc})") from exc
