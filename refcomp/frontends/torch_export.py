"""Import PyTorch models through torch.export (users reach it as `rc.torch`, refcomp/torch.py, which
adds `compile` and `run`: the frontend sits below the driver and never calls it).

    m = rc.torch.export(model.eval(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("B", max=64)}})
    out = m.evaluate({"x": x})                                 # the NumPy reference
    out = m.run({"x": x}, backend="emulator")                  # generated CUDA, torch's dtypes back

`torch.export.export(...).run_decompositions()` gives the model as Core ATen ops; each becomes
refcomp ops through the one op table (aten_table.py, docs/torch.md). Parameters and buffers become
weight inputs named by their state-dict names, fed from `m.weights` by `m.feeds(user_feeds)`, so a
compiled program does not depend on the weights' values; torch's dynamic dims become refcomp's
symbolic dims with their ranges, so one program runs every size in range. torch is imported only
when a model is.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..errors import FeedError, RefcompError
from ..reference.reference import evaluate
from ..ops.graph import symbols_of, toposort

from .torch_graph import dim_names
from .torch_import import Importer


class ExportedModel:
    """An imported ExportedProgram: refcomp tensors for its inputs and outputs, and the weights to feed.

    inputs: user inputs (name as in forward's signature -> Tensor; an integer input's int32 ids)
    input_types, output_types: torch's dtype names ("float32", "int64", "bool", ...)
    outputs: the forward's tensor outputs flattened in order, named "output" (one) or "output0", ...
    static_outputs: outputs known at import time (sizes, static integers)
    weights: arrays by the name of the weight input that reads them (`h.0.attn.c_attn.weight`)
    dims: each symbolic dim's range, name -> (min, max or None); a binding outside is a BindingError
    """

    def __init__(self, importer: Importer):
        self.program = importer.ep
        self.inputs = {
            name: (v.ids if hasattr(v, "ids") and v.ids is not None else v)
            for name, v in importer.inputs.items()
        }
        self.input_types = importer.input_types
        self.outputs = importer.outputs
        self.output_types = importer.output_types
        self.static_outputs = importer.static_outputs
        self.output_names = list(importer.output_types)
        self.weights = importer.weights
        self.dims = dict(importer.dims.ranges)
        self._sources = importer.sources
        nodes = toposort([t.node for t in self.outputs.values()])
        inputs = [n for n in nodes if n.op.name == "Input"]
        self.used_inputs = [n.attrs["name"] for n in inputs]
        self._shapes = {n.attrs["name"]: n.attrs["shape"] for n in inputs}
        self._symbols = {s.name for s in symbols_of(nodes, [t.edge for t in self.outputs.values()])}
        self._symbols -= {d.name for shape in self._shapes.values() for d in shape if hasattr(d, "name")}

    def __repr__(self) -> str:
        return (f"<{type(self).__name__}: inputs {list(self.inputs)}, outputs {self.output_names}, "
                f"{len(self.weights)} weights, dims {self.dims}>")

    def feeds(self, feeds: Optional[Mapping[str, object]] = None) -> dict[str, np.ndarray]:
        """The feeds refcomp needs: the user's arrays (NumPy or torch), converted, plus the weights."""
        feeds = {name: _array(value) for name, value in (feeds or {}).items()}
        for name in feeds:
            if name not in self.input_types:
                raise FeedError(
                    f"feed {name!r} matches no input of the exported model "
                    f"(its inputs are {list(self.input_types)})"
                )
        out: dict[str, np.ndarray] = {}
        for name in self.used_inputs:
            if name in self.weights:
                out[name] = self.weights[name]
                continue
            user, conversion = self._sources[name]
            if user not in feeds:
                raise FeedError(f"input {user!r} was not fed (feeds given: {sorted(feeds)})")
            out[name] = _converted(user, feeds[user], conversion, self.input_types[user])
        return out

    def dims_for(
        self, feeds: Optional[Mapping[str, object]], dims: Optional[Mapping[str, int]] = None
    ) -> dict:
        """`dims` plus the sizes fed inputs show of dims no input the outputs read has: a position
        tensor computed from x.shape[0] alone still runs at the size of the x fed."""
        out = dict(dims or {})
        for name, value in (feeds or {}).items():
            t = self.inputs.get(name)
            for want, got in zip(getattr(t, "shape", ()), np.shape(_array(value))):
                if getattr(want, "name", None) in self._symbols:
                    out.setdefault(want.name, int(got))
        return out

    def evaluate(
        self, feeds: Optional[Mapping[str, object]] = None, dims: Optional[Mapping[str, int]] = None
    ) -> dict:
        """Every output, by the NumPy reference interpreter, with torch's dtype."""
        merged, dims = self.feeds(feeds), self.dims_for(feeds, dims)
        results = evaluate(self.outputs, merged, dims) if self.outputs else {}
        return self.finish(results, merged, dims)

    def finish(self, results: Mapping[str, np.ndarray], feeds: Mapping[str, np.ndarray], dims=None) -> dict:
        """refcomp's float32 results as torch would type them, the static outputs added, in order."""
        from ..symbolic.dims import evaluate_dim
        bindings = dict(dims or {})
        for name, shape in self._shapes.items():
            for want, got in zip(shape, np.shape(feeds.get(name, ()))):
                if hasattr(want, "name"):
                    bindings.setdefault(want.name, int(got))
        out = {}
        for name in self.output_names:
            kind = self.output_types[name]
            if name in self.static_outputs:
                value = self.static_outputs[name]
                out[name] = (
                    value
                    if value is None or isinstance(value, (np.ndarray, float))
                    else evaluate_dim(value, bindings)
                )
            elif kind == "bool":
                out[name] = np.asarray(results[name]) != 0
            elif kind in ("float16",):
                out[name] = np.asarray(results[name]).astype(np.float16)
            elif kind.startswith(("int", "uint")):
                value = np.asarray(results[name])
                out[name] = (
                    value if value.dtype.kind in "iu" else np.rint(value.astype(np.float64))
                ).astype(kind)
            else:
                out[name] = np.asarray(results[name], dtype=np.float32)
        return out


def _array(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
        value = value.float() if str(value.dtype) == "torch.bfloat16" else value
        return value.numpy()
    return np.asarray(value)


def _converted(user: str, array: np.ndarray, conversion: str, dtype: str) -> np.ndarray:
    """A user's array as refcomp's input takes it (see Importer.sources)."""
    if conversion == "bool":
        if array.dtype != np.bool_:
            raise FeedError(f"input {user!r} is bool, but the fed array has dtype {array.dtype}")
        return array.astype(np.float32)
    if conversion == "int":
        if array.dtype.kind not in "iu":
            raise FeedError(f"input {user!r} is {dtype}, but the fed array has dtype {array.dtype}")
        kind = np.int32 if dtype == "int32" else np.int64
        if array.size and (array.min() < np.iinfo(kind).min or array.max() > np.iinfo(kind).max):
            raise FeedError(f"input {user!r}: values do not fit in {np.dtype(kind).name}")
        return np.array(array, dtype=kind, order="C")
    if array.dtype.kind != "f":
        raise FeedError(f"input {user!r} is {dtype}, but the fed array has dtype {array.dtype}")
    return np.array(
        array, dtype=np.float16 if array.dtype == np.float16 and dtype == "float16" else np.float32, order="C"
    )


def export_program(module, args=(), kwargs=None, dynamic_shapes=None, strict: bool = False):
    """torch.export.export(...).run_decompositions(): the module as Core ATen ops; and the user's dim
    names (torch's symbol -> the name of its torch.export.Dim)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is an optional dependency
        raise RefcompError("rc.torch needs PyTorch (pip install torch)") from None
    args = tuple(args) if isinstance(args, (list, tuple)) else (args,)
    try:
        ep = torch.export.export(
            module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict
        ).run_decompositions()
    except Exception as exc:  # noqa: BLE001 - torch's own errors (UserError, RuntimeError, ...): the user's to fix
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RefcompError(
            f"torch.export could not export the module ({type(exc).__name__}: {first}); refcomp imports "
            f"what torch.export gives (its own message, chained below, says more)"
        ) from exc
    return ep, dim_names(module, args, kwargs, dynamic_shapes, ep)


def imported(ep, names: Optional[Mapping[str, str]] = None) -> Importer:
    """The program walked by an Importer. Where an integer tensor's exactness needs a max for a dim
    that has none (Dim.AUTO), it is imported again with that max, which its binding must then keep."""
    importer = Importer(ep, dict(names or {})).run()
    if importer.caps:
        importer = Importer(ep, dict(names or {}), importer.caps).run()
    return importer


def import_program(ep, names: Optional[Mapping[str, str]] = None) -> ExportedModel:
    """An ExportedProgram (decomposed or not) as an ExportedModel; `names` renames torch's dims."""
    return ExportedModel(imported(ep, names))


def export(module, args=(), kwargs=None, dynamic_shapes=None, strict: bool = False) -> ExportedModel:
    """torch.export a module and import it (see the module docstring)."""
    ep, names = export_program(module, args, kwargs, dynamic_shapes, strict)
    return import_program(ep, names)


__all__ = ["ExportedModel", "export", "export_program", "import_program", "imported"]
