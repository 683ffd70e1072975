"""Reading and checking an ONNX model before import: the file, its external data, onnx's checker,
and refcomp's own checks, which run first so that every problem is reported by the node at fault."""
from __future__ import annotations

import os
import warnings

from ..errors import RefcompError

MIN_OPSET = 13  # the operators are imported with their meaning at this opset and later

# Operators whose meaning on float tensors has not changed since opset 6 (later versions only added
# types such as bfloat16): a model of opset 6 to 12 that uses only these imports as it is. Any other
# operator of an older opset goes through onnx.version_converter first.
UNCHANGED_SINCE_6 = frozenset({
    "Abs", "Ceil", "Cos", "Elu", "Exp", "Floor", "HardSigmoid", "Identity", "LeakyRelu", "Log", "Neg",
    "Reciprocal", "Relu", "Selu", "Sigmoid", "Sin", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh"})


class OpsetConverted(UserWarning):
    """An older-opset model was converted to MIN_OPSET by onnx.version_converter on import."""


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - exercised only without onnx installed
        raise RefcompError("the ONNX frontend needs the 'onnx' package (pip install onnx)") from exc
    return onnx


def _onnx_message(exc: Exception) -> str:
    """onnx's key message: its first lines (the context lines it appends repeat what refcomp says)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:2]) or type(exc).__name__


def load(model_or_path, base_dir=None):
    """A checked `onnx.ModelProto` from a ModelProto, serialized bytes, or a file path.

    External data is read from `base_dir`, by default the folder of a file path. A ModelProto or
    bytes carry no folder: their external data is read only from a `base_dir` the caller names,
    never from the current directory (where an untrusted model could point at any file).
    refcomp's own checks run before onnx's checker, so that an unsupported operator, a node the
    checker rejects, or an undefined input is reported by its node rather than by onnx's first
    complaint about the graph (an undefined input reads "not topologically sorted" there).
    """
    onnx = _onnx()
    from google.protobuf.message import DecodeError

    path = None
    if base_dir is not None and not isinstance(base_dir, (str, os.PathLike)):
        raise RefcompError(f"base_dir must be a folder path, got {type(base_dir).__name__}")
    if isinstance(model_or_path, onnx.ModelProto):
        model, where = model_or_path, "the ONNX model"
    else:
        if isinstance(model_or_path, (bytes, bytearray)):
            data, where = bytes(model_or_path), "the ONNX bytes"
        elif isinstance(model_or_path, (str, os.PathLike)):
            path = os.fspath(model_or_path)
            where = f"ONNX file {path!r}"
            base_dir = os.path.dirname(os.path.abspath(path)) if base_dir is None else base_dir
            try:
                with open(model_or_path, "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise RefcompError(f"cannot read {where}: {exc}") from exc
        else:
            raise RefcompError(
                f"import_model takes an onnx.ModelProto, bytes or a file path, "
                f"got {type(model_or_path).__name__}"
            )
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise RefcompError(
                f"{where} is not a valid ONNX model (truncated or corrupt file?): {exc}"
            ) from exc
    model = _with_external_data(model, base_dir, where, copy=isinstance(model_or_path, onnx.ModelProto))
    if not model.HasField("graph") or not model.graph.output:
        raise RefcompError(f"{where} has no graph outputs (truncated or corrupt file?)")
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        raise RefcompError(
            f"{where} declares no opset of the default ONNX domain (truncated or corrupt file?)"
        )
    _refuse_unsupported_operators(
        model
    )  # before any conversion: the user's operators, named by the user's nodes
    model = at_supported_opset(model, where)
    check_supported(model)
    check_defined(model)
    try:  # a model over 2 GiB (its external data loaded) can only be checked from its file
        big = path is not None and model.ByteSize() > onnx.checker.MAXIMUM_PROTOBUF
        onnx.checker.check_model(path if big else model)
    except Exception as exc:  # noqa: BLE001 - ValidationError, ValueError, ...: onnx's checker raises several kinds
        raise RefcompError(f"{where} is malformed: {_onnx_message(exc)}") from exc
    return model


def default_opset(model) -> int:
    return max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def at_supported_opset(model, where: str):
    """The model itself when its opset is MIN_OPSET or later, or older with only operators whose
    meaning never changed (UNCHANGED_SINCE_6); otherwise the model converted to MIN_OPSET by
    onnx.version_converter, said once as an `OpsetConverted` warning. Converting a model of IR
    version < 4 can add initializers that are not graph inputs, which that IR forbids: the converted
    model declares IR version 7, the first that opset 13 belongs to."""
    opset = default_opset(model)
    if opset >= MIN_OPSET or (
        opset >= 6
        and all(n.op_type in UNCHANGED_SINCE_6 and n.domain in ("", "ai.onnx") for n in model.graph.node)
    ):
        return model
    from onnx import version_converter
    if opset < 7:
        model = _channel_slopes(model)
    try:
        converted = version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError, ValueError or its own C++ errors
        raise RefcompError(
            f"{where} uses opset {opset}, and onnx.version_converter could not convert it to opset "
            f"{MIN_OPSET} (refcomp imports opset {MIN_OPSET} and later): {_onnx_message(exc)}"
        ) from exc
    converted.ir_version = max(converted.ir_version, 7)
    warnings.warn(f"{where} uses opset {opset}: converted to opset {MIN_OPSET} with onnx.version_converter",
                  OpsetConverted, stacklevel=3)
    return converted


def _channel_slopes(model):
    """Before opset 7, PRelu's 1-D slope of size C applied per channel (axis 1); from opset 7 it
    broadcasts like any operand (against the last axis), and the converter leaves it as it is. A copy
    of the model whose slope initializers have the shape (C, 1, ..., 1) means the same at any opset."""
    import onnx
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {
        vi.name: len(vi.type.tensor_type.shape.dim)
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info)
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
    }
    model = onnx.ModelProto.FromString(model.SerializeToString())
    initializers = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "PRelu" or len(node.input) != 2:
            continue
        slope, rank = initializers.get(node.input[1]), ranks.get(node.input[0], 0)
        if slope is not None and len(slope.dims) == 1 and slope.dims[0] > 1 and rank > 2:
            slope.dims.extend([1] * (rank - 2))
            for vi in model.graph.input:  # IR < 4 lists every initializer as a graph input too
                if vi.name == slope.name and vi.type.tensor_type.HasField("shape"):
                    for _ in range(rank - 2):
                        vi.type.tensor_type.shape.dim.add().dim_value = 1
    return model


def _tensors(graph):
    """Every TensorProto a graph holds: initializers, sparse ones, node attributes, subgraphs'."""
    for t in graph.initializer:
        yield t
    for s in graph.sparse_initializer:
        yield from (s.values, s.indices)
    for node in graph.node:
        for a in node.attribute:
            yield from ([a.t] if a.HasField("t") else []) + list(a.tensors)
            if a.HasField("sparse_tensor"):
                yield from (a.sparse_tensor.values, a.sparse_tensor.indices)
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _tensors(g)


def _with_external_data(model, base_dir, where: str, copy: bool):
    """The model with its external tensors read in (into a copy when it is the caller's ModelProto).

    Without a `base_dir` (bytes or a ModelProto) an external tensor is refused rather than read
    from the current directory. A location must name a file inside `base_dir`: an absolute path or
    one that climbs out (`../../etc/passwd`, a symbolic link) is refused by refcomp before onnx reads
    anything, so the rule does not hang on onnx's own checks."""
    from onnx import external_data_helper as ext
    if not any(ext.uses_external_data(t) for t in _tensors(model.graph)):
        return model
    if copy:
        original, model = model, type(model)()
        model.CopyFrom(original)
    folder = None if base_dir is None else os.path.realpath(os.fspath(base_dir))
    for t in _tensors(model.graph):
        if not ext.uses_external_data(t):
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        if folder is None:
            raise RefcompError(
                f"{where}: tensor {t.name!r} keeps its data in the external file {location!r}, and a "
                f"model given as bytes or a ModelProto has no folder to read it from: pass "
                f"base_dir=<the folder that holds {location!r}>, or import the model from its file path"
            )
        _check_location(t.name, location, folder, where)
        try:
            ext.load_external_data_for_tensor(t, folder)
        except Exception as exc:  # noqa: BLE001 - ValidationError, OSError, ValueError
            raise RefcompError(
                f"{where}: cannot load the external data of tensor {t.name!r}: {_onnx_message(exc)}"
            ) from exc
    return model


def _check_location(name: str, location: str, folder: str, where: str) -> None:
    """Refuse an external data location that is absolute or resolves outside `folder`."""
    if not location or "\0" in location or os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise RefcompError(
            f"{where}: tensor {name!r} names its external data file {location!r}, which is not a "
            f"relative path inside the directory of the model ({folder!r})"
        )
    target = os.path.realpath(os.path.join(folder, location))
    if os.path.commonpath([target, folder]) != folder or target == folder:
        raise RefcompError(
            f"{where}: tensor {name!r} names its external data file {location!r}, which points outside "
            f"the directory of the model ({folder!r})"
        )


def register_operators() -> None:
    """Import every operator module: each registers its operators in onnx_ops_core.OPS as it loads."""
    from . import (onnx_ops_index, onnx_ops_linalg, onnx_ops_math, onnx_ops_nd, onnx_ops_nn,  # noqa: F401
                   onnx_ops_reduce, onnx_ops_resize, onnx_ops_rnn, onnx_ops_shape)


def check_supported(model) -> None:
    """Refuse unsupported operators and attributes, and nodes onnx's checker rejects, by node."""
    from onnx import checker

    from . import onnx_ops_core as core
    register_operators()
    context = checker.C.CheckerContext()
    context.ir_version = model.ir_version
    context.opset_imports = {o.domain: o.version for o in model.opset_import}
    _refuse_unsupported_operators(model)
    for index, node in enumerate(model.graph.node):
        ctx = core.NodeContext(None, node, index)
        spec = core.OPS[node.op_type]
        for a in node.attribute:
            if a.name not in spec.attrs:
                raise ctx.attr_error(
                    a.name,
                    ctx.attr(a.name),
                    f"{node.op_type} supports the attributes {sorted(spec.attrs) or 'none'}",
                )
        try:
            checker.check_node(node, context)
        except Exception as exc:  # noqa: BLE001 - ValidationError, or a schema lookup failure
            raise ctx.error(f"onnx.checker: {_onnx_message(exc)}") from exc


def _refuse_unsupported_operators(model) -> None:
    """Every operator refcomp cannot import, in one error: a user learns the whole gap at once."""
    from . import onnx_ops_core as core
    register_operators()
    unsupported: dict[str, list] = {}
    for index, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in core.OPS:
            op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            unsupported.setdefault(op, []).append(core.NodeContext(None, node, index))
    if not unsupported:
        return
    if len(unsupported) == 1 and len(next(iter(unsupported.values()))) == 1:
        (op, (ctx,)), = unsupported.items()
        if "." in op:
            raise ctx.error(f"operator {op} is not supported (only the default ONNX domain is)")
        raise ctx.error(
            f"operator {op} is not supported by refcomp (see docs/onnx.md for the operator table)"
        )
    parts = []
    for op, nodes in unsupported.items():
        shown = ", ".join(repr(c.label) for c in nodes[:3]) + (
            f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
        )
        parts.append(f"{op} ({len(nodes)} node{'s' if len(nodes) > 1 else ''}: {shown})")
    raise RefcompError(
        f"the ONNX model uses {len(unsupported)} operator{'s' if len(unsupported) > 1 else ''} refcomp "
        f"does not support: {'; '.join(parts)} (only the default ONNX domain; see docs/onnx.md for the "
        f"operator table)"
    )


def check_defined(model) -> None:
    """Every node input, and every graph output, must be produced earlier and exactly once."""
    from . import onnx_ops_core as core
    graph = model.graph
    known = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    known |= {vi.name for vi in graph.input}
    producer: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            producer.setdefault(name, index)
    for index, node in enumerate(graph.node):
        ctx = core.NodeContext(None, node, index)
        for name in node.input:
            if not name or name in known:
                continue
            later = producer.get(name)
            if later is None:
                raise ctx.error(
                    f"input {name!r} is undefined: no node, initializer or graph input produces it"
                )
            other = core.NodeContext(None, graph.node[later], later)
            raise ctx.error(
                f"input {name!r} is produced by a later node ({other.op_type} node {other.label!r}); "
                f"ONNX nodes must be in topological order"
            )
        for name in filter(None, node.output):
            if name in known:
                raise ctx.error(
                    f"output {name!r} is already produced by an earlier node, initializer or graph input "
                    f"(ONNX assigns each name once)"
                )
            known.add(name)
    for vi in graph.output:
        if vi.name not in known:
            raise RefcompError(
                f"graph output {vi.name!r} is undefined: no node, initializer or graph input produces it"
            )
