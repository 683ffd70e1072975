"""refcomp: a readable reference compiler for tensor programs that emits CUDA.

The public names load on first use (PEP 562 `__getattr__`), so `import refcomp` and `refcomp
--version` do not pay for SymPy, NumPy, Jinja2 and the compiler (issue 32: start-up); the first
`rc.input(...)` imports the ops, the first `rc.compile(...)` the compiler. Each table below says
which submodule defines a name; a public name is added there (and to `__all__` if `import *` should
bring it). tests/test_startup.py checks that every name resolves and what `import refcomp` imports;
tests/test_layers.py reads these tables as imports of `__init__`.
"""
from importlib import import_module as _import_module

from .version import __version__

from .ops import names as _names

# name -> the submodule that defines it under that name
_ATTRIBUTES = {
    **dict.fromkeys(
        ("AllocationError", "BindingError", "CacheError", "FeedError", "RefcompError", "ShapeError",
         "UnsupportedError"),
        ".errors",
    ),
    **dict.fromkeys(("BoolTensor", "Tensor", "constant", "input"), ".ops.tensor"),
    **dict.fromkeys(("cat", "concat", "stack"), ".ops.joining"),
    **dict.fromkeys(("fmod", "maximum", "minimum", "where"), ".ops.elementwise"),
    "einsum": ".ops.linalg",
    **dict.fromkeys(
        ("arange", "eye", "full", "full_like", "linspace", "ones", "ones_like", "zeros", "zeros_like"),
        ".ops.creation",
    ),
    "atan2": ".ops.trigonometry",
    **dict.fromkeys(("ceil", "erf", "erfc", "expm1", "floor", "log1p", "tanh"), ".ops.special"),
    **dict.fromkeys(("Generator", "default_generator", "manual_seed"), ".ops.philox"),
    "evaluate": ".reference.reference",
    "Program": ".exec.program",
    "load_program": ".pipeline.load",
    "compile": ".compiler",
    **dict.fromkeys(("Mesh", "shard"), ".spmd"),
}

# name -> a submodule that is itself the attribute: the public ones (rc.nn, rc.onnx, ...), and the
# subpackages the package used to import eagerly, which code reaches as rc.compiler.H200, rc.ops.graph
_SUBMODULES = {
    "nn": ".ops.nn",
    "return_types": ".ops.return_types",
    "onnx": ".onnx",
    "torch": ".torch",
    "spmd": ".spmd",
    "serving": ".serving",
    **{
        unit: f".{unit}"
        for unit in (
            "codegen",
            "compiler",
            "errors",
            "exec",
            "frontends",
            "golden",
            "measure",
            "ops",
            "progress",
            "search",
            "symbolic",
        )
    },
}

# name -> (submodule, table): an entry of a dict in that submodule; rc.exp(x) is x.exp(), rc.float32 is
# "float32", rc.rand(...) draws
_TABLES = {
    **dict.fromkeys(_names.RANDOM, (".ops.random_tensors", "FUNCTIONS")),
    **dict.fromkeys(_names.FUNCTIONS, (".ops.functions", "FUNCTIONS")),
    **dict.fromkeys(_names.DTYPES, (".ops.functions", "DTYPES")),
}

_BUILTINS = {
    "abs",
    "max",
    "min",
    "sum",
    "round",
    "pow",
    "bool",
}  # rc.max, but `from refcomp import *` keeps Python's

__all__ = [
    "Tensor",
    "BoolTensor",
    "input",
    "constant",
    "cat",
    "concat",
    "stack",
    "where",
    "maximum",
    "minimum",
    "fmod",
    "erf",
    "erfc",
    "tanh",
    "expm1",
    "log1p",
    "floor",
    "ceil",
    "arange",
    "einsum",
    "atan2",
    "eye",
    "full",
    "full_like",
    "linspace",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
    *sorted(set(_names.FUNCTIONS) - _BUILTINS),
    *sorted(_names.RANDOM),
    "Generator",
    "default_generator",
    "manual_seed",
    *sorted(set(_names.DTYPES) - _BUILTINS),
    "nn",
    "return_types",
    "evaluate",
    "Program",
    "compile",
    "load_program",
    "onnx",
    "torch",
    "spmd",
    "Mesh",
    "shard",
    "RefcompError",
    "ShapeError",
    "BindingError",
    "FeedError",
    "AllocationError",
    "CacheError",
    "UnsupportedError",
    "serving",
]


def __getattr__(name: str):
    """Import the submodule behind `name` on first use and keep the value as a plain global, so the
    next lookup does not come here."""
    if name in _TABLES:
        module, table = _TABLES[name]
        value = getattr(_import_module(module, __name__), table)[name]
    elif name in _SUBMODULES:
        value = _import_module(_SUBMODULES[name], __name__)
    elif name in _ATTRIBUTES:
        value = getattr(_import_module(_ATTRIBUTES[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_ATTRIBUTES) | set(_SUBMODULES) | set(_TABLES))
