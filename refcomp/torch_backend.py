"""A TorchDynamo backend: `torch.compile(model, backend="refcomp")` runs each captured graph as
refcomp's CUDA. Dynamo's graph is lowered to Core ATen by AOTAutograd, then imported by the
torch.export frontend's Importer (frontends/torch_import.py) through a small adapter, and compiled
once per graph. Lowering, dims, options, inference-only use and errors: docs/torch.md,
"torch.compile". torch is imported only when a graph is compiled.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from .errors import RefcompError
from .frontends.torch_import import Importer
from .torch import TorchModel

__all__ = ["refcomp_backend", "RefcompGraph", "stats", "OPTIONS"]

OPTIONS = {"backend": (None, "pycuda", "emulator", "numpy"), "search": (True, False)}
stats = {"graphs": 0, "compiles": 0, "runs": 0}  # graphs imported, rc.compile calls, runs (tests count them)


def refcomp_backend(gm, example_inputs: Sequence[Any], options: Optional[Mapping[str, Any]] = None, **kwargs):
    """The dynamo backend: (GraphModule, example inputs) -> the callable dynamo runs the graph with.
    `options` are torch.compile's; other keyword arguments (mode=) are accepted and ignored."""
    options = _checked(options)
    from torch._decomp import core_aten_decompositions
    from torch._dynamo.backends.common import aot_autograd

    def forward(aten_gm, aten_inputs):
        return RefcompGraph(aten_gm, aten_inputs, **options)

    lower = aot_autograd(fw_compiler=forward, inference_compiler=forward, bw_compiler=_no_backward,
                         decompositions=core_aten_decompositions())
    return lower(gm, example_inputs)


def _checked(options) -> dict:
    out = {"backend": None, "search": True}
    for key, value in dict(options or {}).items():
        if key not in OPTIONS:
            raise RefcompError(f"unknown refcomp option {key!r}: the options are {sorted(OPTIONS)}")
        if value not in OPTIONS[key]:
            raise RefcompError(f"refcomp option {key!r} = {value!r}: choose one of {list(OPTIONS[key])}")
        out[key] = value
    return out


def _no_backward(gm, example_inputs):
    def refuse(*args):
        raise RefcompError(
            "refcomp compiles inference only: a backward through a torch.compile'd refcomp graph is "
            "not supported (run the model under torch.no_grad(), or use another backend to train)"
        )

    return refuse


class RefcompGraph:
    """One Core ATen graph, imported and compiled once; called with dynamo's runtime arguments."""

    def __init__(self, gm, example_inputs, backend: Optional[str] = None, search: bool = True):
        self.gm, self.backend, self.search = gm, backend, search
        self.model = TorchModel(_imported(gm))
        self.placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        stats["graphs"] += 1
        if backend != "numpy" and self.model.outputs:
            self.model.compile(search)  # once: every size in the dims' ranges runs this program
            stats["compiles"] += 1

    def __call__(self, *args):
        import torch
        if len(args) == 1 and isinstance(args[0], list) and len(self.placeholders) != 1:
            args = tuple(args[0])  # a boxed call
        feeds = {name: a for name, a in zip(self.placeholders, args) if isinstance(a, torch.Tensor)}
        device = next((a.device for a in feeds.values()), torch.device("cpu"))
        results = self.model.run(feeds, backend=self.backend, search=self.search)
        stats["runs"] += 1
        return tuple(_tensor(results[name], device) for name in self.model.output_names)


def _tensor(value, device):
    import numpy as np
    import torch
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value)).to(device)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return int(value)  # a size (sympy Integer)


# --- the adapter: an AOTAutograd graph as the Importer reads an ExportedProgram ------------------------
class _Arg:
    def __init__(self, name: str):
        self.name = name


class _Spec:
    def __init__(self, name: str, kind: str):
        self.arg, self.kind, self.target = _Arg(name), _Kind(kind), None


class _Kind:
    def __init__(self, name: str):
        self.name = name


class _Signature:
    def __init__(self, gm):
        self.input_specs = [_Spec(n.name, "USER_INPUT") for n in gm.graph.nodes if n.op == "placeholder"]
        out = next(n for n in gm.graph.nodes if n.op == "output")
        self.output_specs = [_Spec(getattr(a, "name", ""), "USER_OUTPUT") for a in out.args[0]]


class _Program:
    """What the Importer reads of an ExportedProgram: graph, graph_signature, state_dict, constants and
    range_constraints (each size symbol's range, from dynamo's ShapeEnv)."""

    def __init__(self, gm):
        self.graph, self.graph_signature = gm.graph, _Signature(gm)
        self.state_dict, self.constants = {}, {}
        self.range_constraints = _ranges(gm)


def _ranges(gm) -> dict:
    import torch
    symbols, env = set(), None
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        sizes = list(val.shape) if isinstance(val, torch.Tensor) else [val]
        for n in sizes:
            if isinstance(n, torch.SymInt):
                symbols |= n.node.expr.free_symbols
                env = n.node.shape_env
    return {s: env.var_to_range[s] for s in sorted(symbols, key=str)} if env is not None else {}


class _GraphImporter(Importer):
    """The Importer with a SymInt placeholder (a size dynamo passes) taken as the refcomp dim it names;
    the run binds it from the tensors' shapes."""

    def _placeholder(self, node, spec):
        import torch
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            return self.dims.dim(val, f"input {node.name!r}")
        if isinstance(val, (int, float, bool)):
            raise RefcompError(
                f"graph input {node.name!r} is a number ({val!r}) fed at run time, which refcomp "
                f"cannot take as a tensor"
            )
        return super()._placeholder(node, spec)


def _imported(gm) -> _GraphImporter:
    program = _Program(gm)
    importer = _GraphImporter(program, {}).run()
    if importer.caps:
        importer = _GraphImporter(program, {}, importer.caps).run()
    return importer
