"""An `onnx.backend.base.Backend` for refcomp, so ONNX's conformance suite runs against it: device
"CPU" runs the NumPy reference interpreter, "CUDA" the generated CUDA on an executor (the host
emulator by default). The devices, the executors and the model specialised on its integer inputs:
docs/onnx.md, "The ONNX backend and the conformance suite".
"""
from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from .errors import RefcompError
from .onnx import import_model, load
from .frontends.onnx_ops_core import StaticInputRequired

EXECUTORS = ("numpy", "emulator", "pycuda")


def executor_for(device: str) -> str:
    kind = device.split(":")[0].upper()
    if kind == "CPU":
        return "numpy"
    if kind == "CUDA":
        return os.environ.get("REFCOMP_ONNX_CUDA_EXECUTOR", "emulator")
    raise RefcompError(f"unknown device {device!r}: use 'CPU' (NumPy reference) or 'CUDA' (compiled)")


class RefcompRep(BackendRep):
    """A prepared model: imported (and compiled) once per specialisation of its integer inputs."""

    def __init__(self, model: onnx.ModelProto, executor: str):
        self.model = model
        self.executor = executor
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [vi.name for vi in model.graph.input if vi.name not in initializers]
        self.output_types = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.output}
        self.static_names: set[str] = set()
        self._imported: dict[tuple, Any] = {}
        self._import({})  # import errors (unsupported op, attribute, dtype) surface at prepare time

    def _import(self, constants: dict):
        key = tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in sorted(constants.items()))
        if key not in self._imported:
            try:
                self._imported[key] = import_model(self.model, constants=constants)
            except StaticInputRequired as exc:
                self.static_names.add(exc.input_name)
                self._imported[key] = exc
        return self._imported[key]

    def imported(self, feeds: dict):
        """The model imported with the static integer inputs fixed to the values in `feeds`."""
        while True:
            constants = {n: np.asarray(feeds[n]) for n in sorted(self.static_names) if n in feeds}
            missing = [n for n in self.static_names if n not in feeds]
            if missing:
                raise RefcompError(f"input {missing[0]!r} was not fed")
            result = self._import(constants)
            if not isinstance(result, StaticInputRequired):
                break
            if result.input_name in constants:
                raise result
        if constants and result.static_outputs:
            name = next(iter(result.static_outputs))
            raise RefcompError(
                f"output {name!r} would be folded at import time from the run-time values of integer inputs "
                f"{sorted(constants)}; refcomp does not compute integer tensors"
            )
        return result, constants

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) > len(self.input_names):
                raise RefcompError(
                    f"{len(inputs)} inputs given for the model's {len(self.input_names)} inputs "
                    f"{self.input_names}"
                )
            feeds = dict(zip(self.input_names, inputs))
        m, constants = self.imported(feeds)
        user = {n: a for n, a in feeds.items() if n not in constants}
        results = m.run(user, backend=self.executor)
        outputs = []
        for name in m.output_names:
            array = results[name]
            etype = self.output_types.get(name, 0)
            outputs.append(
                np.asarray(array).astype(helper.tensor_dtype_to_np_dtype(etype)) if etype else array
            )
        return namedtupledict("Outputs", m.output_names)(*outputs)


class RefcompBackend(Backend):
    """ONNX backend API over refcomp (devices and executors: docs/onnx.md)."""

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            RefcompRep(load(model), executor_for(device))
        except RefcompError:
            return False
        return True

    @classmethod
    def prepare(cls, model, device: str = "CPU", executor: Optional[str] = None, **kwargs: Any) -> RefcompRep:
        executor = executor or executor_for(device)
        if executor not in EXECUTORS:
            raise RefcompError(f"unknown executor {executor!r}: use one of {EXECUTORS}")
        return RefcompRep(load(model), executor)

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info=None, **kwargs: Any
    ) -> tuple:
        """Run one node: wrap it in a model whose inputs take the given arrays' types and shapes."""
        arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, dict) else inputs)]
        names = [n for n in node.input if n]
        opset = kwargs.pop("opset_version", None) or onnx.defs.onnx_opset_version()
        try:
            graph_inputs = [
                helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                for n, a in zip(names, arrays)
            ]
            empty = [onnx.ValueInfoProto(name=n) for n in node.output if n]
            model = helper.make_model(helper.make_graph([node], "node", graph_inputs, empty),
                                      opset_imports=[helper.make_opsetid("", opset)])
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception as exc:  # noqa: BLE001 - an input dtype ONNX has no type for, InferenceError, ...
            raise RefcompError(f"ONNX {node.op_type} node {node.name!r}: cannot build a model around it: "
                               f"{type(exc).__name__}: {exc}") from exc
        types = {vi.name: vi.type for vi in inferred.graph.value_info}
        types.update({vi.name: vi.type for vi in inferred.graph.output if vi.type.HasField("tensor_type")})
        for vi in model.graph.output:
            if vi.name not in types:
                raise RefcompError(f"cannot infer the type of output {vi.name!r} of the {node.op_type} node")
            vi.type.CopyFrom(types[vi.name])
        return cls.prepare(model, device, **kwargs).run(dict(zip(names, arrays)))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() in ("CPU", "CUDA")


prepare = RefcompBackend.prepare
run_model = RefcompBackend.run_model
run_node = RefcompBackend.run_node
supports_device = RefcompBackend.supports_device


# --- which ONNX node tests run, and why the others do not ------------------------------------------
# tests/test_onnx_backend.py and scripts/onnx_report.py share this selection. A node test is *in
# scope* when its operator (for an `_expanded` test: the operator it expands) is one refcomp imports.
# In-scope tests must pass, except those matched below, each with its reason.

#: In-scope tests that must raise RefcompError: their data types or modes are outside refcomp's scope.
EXPECTED_ERRORS: list[tuple[str, str]] = [
    (
        r"(?i)^(?!test_div_int32_trunc$).*_(u?int(2|4|8|16|32|64)|string|float8\w*|float4\w*)(_|$)",
        "integer, 8- and 4-bit float or string tensors (refcomp's ONNX import computes float32 and float64, "
        "stores float16 and bfloat16, bool as 0/1, and integers in Add, Sub, Mul and Div of integer inputs)",
    ),
    (
        r"^test_cast(like)?_(?!(FLOAT|FLOAT16|BFLOAT16)_to_(FLOAT|FLOAT16|BFLOAT16)(_expanded)?$)",
        "converts from or to a type other than FLOAT, FLOAT16, BFLOAT16",
    ),
    (
        r"^test_(equal|equal_bcast|mod_broadcast|where_long_example|edge_pad|reflect_pad|wrap_pad)$",
        "computes on INT32/INT64 data",
    ),
    (
        r"^test_resize_.*(cubic|antialias|tf_crop_and_resize|not_larger|not_smaller)",
        "Resize modes refcomp does not "
        "import: cubic, antialias, tf_crop_and_resize, keep_aspect_ratio_policy",
    ),
    (r"^test_tri[lu](_|$)", "INT64 data (tests/test_onnx_linalg.py checks Trilu on FLOAT)"),
    (r"^test_training_dropout|_training_mode$", "training mode"),
    (r"^test_identity_(sequence|opt)$", "sequence and optional types"),
    (
        r"^test_maxpool_with_argmax_2d_precomputed_strides$",
        "MaxPool's column-major Indices (storage_order=1)",
    ),
    (r"^test_constantofshape_int_", "an INT32 output computed from a run-time shape input"),
    (
        r"^test_range_int32",
        "an INT32 range fed at run time would be folded from the fed values, not computed",
    ),
    (
        r"^test_range_.*_expanded$",
        "the expansion computes the range with Loop, which refcomp does not import",
    ),
]

#: In-scope tests that are excluded: (pattern, reason, devices) for a limitation of refcomp.
KNOWN_FAILURES: list[tuple[str, str, tuple[str, ...]]] = []

#: Node tests run on the emulator by default (the whole in-scope set runs under `pytest -m slow`):
#: the first two tests of each operator, plus these, which cover attributes the first two miss.
EMULATOR_EXTRA = [
    "test_averagepool_2d_ceil",
    "test_averagepool_2d_pads_count_include_pad",
    "test_averagepool_2d_same_lower",
    "test_maxpool_2d_dilations",
    "test_maxpool_2d_same_upper",
    "test_maxpool_1d_default",
    "test_conv_with_strides_and_asymmetric_padding",
    "test_conv_with_autopad_same",
    "test_convtranspose_pads",
    "test_convtranspose_output_shape",
    "test_convtranspose_group_2",
    "test_convtranspose_dilations",
    "test_gather_2d_indices",
    "test_gather_negative_indices",
    "test_slice_neg_steps",
    "test_constant_pad_negative_axes",
    "test_layer_normalization_4d_axis_negative_4",
    "test_gelu_tanh_2",
    "test_erf",
    "test_pow_bcast_array",
    "test_softmax_axis_0",
    "test_split_variable_parts_2d_opset18",
    "test_tile_precomputed",
    "test_expand_dim_changed",
    "test_reduce_prod_default_axes_keepdims_random",
    "test_reduce_l2_keep_dims_random",
    "test_where_example",
    "test_batchnorm_epsilon",
    "test_globalaveragepool_precomputed",
    "test_flatten_negative_axis1",
]


def _matches(patterns, name: str):
    import re
    for entry in patterns:
        if re.search(entry[0], name):
            return entry
    return None


def _node_cases() -> dict:
    """ONNX's node test cases by name. This onnx generates them by running every case's reference
    implementation (seconds, in every process that collects the suite; docs/onnx.md), so they are
    pickled once per onnx version in refcomp's cache; a damaged file is regenerated."""
    import pickle
    import warnings

    from onnx.backend.test.loader import load_model_tests

    from .exec.cache import cache_dir
    path = cache_dir("onnx") / f"node_cases_{onnx.__version__}_{pickle.HIGHEST_PROTOCOL}.pickle"
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, IndexError, ValueError):
        pass  # no file yet, or one a crash cut short: generate the cases
    with warnings.catch_warnings():  # generating the cases divides by zero on purpose (empty-set tests)
        warnings.simplefilter("ignore")
        cases = {c.name: c for c in load_model_tests(kind="node")}
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(partial, "wb") as f:
            pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:  # a full disk: the next process generates the cases again
        partial.unlink(missing_ok=True)
    return cases


def conformance_runner(module_name: str):
    """ONNX's `BackendTest` for this backend, its node cases read through `_node_cases` (ONNX's runner
    would generate them again: its loader has no other source for node cases in this version)."""
    from onnx.backend.test import runner

    generate = runner.load_model_tests
    runner.load_model_tests = lambda *args, kind=None, **kw: (list(_node_cases().values()) if kind == "node"
                                                              else generate(*args, kind=kind, **kw))
    try:
        return runner.Runner(RefcompBackend, module_name)
    finally:
        runner.load_model_tests = generate


def node_test_selection() -> dict:
    """Classify ONNX's node tests: {"cases": {name: TestCase}, "in_scope": [...], "expected_errors":
    {name: reason}, "known_failures": {(name, device): reason}, "run": [...], "emulator_subset": [...]}."""
    import re

    from .frontends.onnx_load import register_operators
    from .frontends.onnx_ops_core import OPS
    register_operators()

    cases = _node_cases()

    def operators(case) -> set:
        base = cases.get(re.sub(r"_expanded(_ver\d+)?$", "", case.name), case)
        return {n.op_type for n in base.model.graph.node}

    in_scope = sorted(n for n, c in cases.items() if operators(c) <= set(OPS))
    expected = {n: e[1] for n in in_scope if (e := _matches(EXPECTED_ERRORS, n))}
    known = {(n, d): k[1] for n in in_scope if n not in expected for d in ("CPU", "CUDA")
             if (k := _matches(KNOWN_FAILURES, n)) and d in k[2]}
    run = [n for n in in_scope if n not in expected]
    per_op: dict[str, list] = {}
    for n in run:
        if "_expanded" not in n and (n, "CUDA") not in known:
            per_op.setdefault("/".join(sorted(operators(cases[n]))), []).append(n)
    subset = {n for names in per_op.values() for n in names[:2]} | (set(EMULATOR_EXTRA) & set(run))
    return {"cases": cases, "in_scope": in_scope, "expected_errors": expected, "known_failures": known,
            "run": run, "emulator_subset": sorted(subset)}
