"""refcomp: a readable reference compiler for tensor programs that emits CUDA."""
__version__ = "0.1.0"  # the fallback for `refcomp --version` when the distribution is not installed; keep equal to pyproject.toml
from .errors import AllocationError, BindingError, CacheError, FeedError, RefcompError, ShapeError
from .ops.tensor import BoolTensor, Tensor, constant, input
from .ops.movement import cat, concat, stack
from .ops.elementwise import fmod, maximum, minimum, where
from .ops.linalg import einsum
from .ops.creation import arange, eye, full, full_like, linspace, ones, ones_like, zeros, zeros_like
from .ops.trigonometry import atan2
from .ops.special import ceil, erf, erfc, expm1, floor, log1p, tanh
from .ops.functions import DTYPES as _DTYPES, FUNCTIONS as _FUNCTIONS
from .ops import nn, return_types
from .exec.reference import evaluate
from .exec.program import Program, load_program
from .compiler import compile
from . import onnx  # the onnx package itself is imported only when a model is first imported
from . import torch  # rc.torch: torch itself is imported only when a model is exported
from . import spmd
from .spmd import Mesh, shard

globals().update(_FUNCTIONS)  # rc.exp(x), rc.softmax(x, -1), rc.matmul(a, b), ...: the Tensor methods as functions
globals().update(_DTYPES)  # rc.float32, rc.int64, rc.bool, ...: dtype names
_BUILTINS = {"abs", "max", "min", "sum", "round", "pow", "bool"}  # rc.max, but `from refcomp import *` keeps Python's

__all__ = ["Tensor", "BoolTensor", "input", "constant", "cat", "concat", "stack", "where", "maximum", "minimum", "fmod",
           "erf", "erfc", "tanh", "expm1", "log1p", "floor", "ceil",
           "arange", "einsum", "atan2", "eye", "full", "full_like", "linspace", "ones", "ones_like", "zeros",
           "zeros_like", *sorted(set(_FUNCTIONS) - _BUILTINS), *sorted(set(_DTYPES) - _BUILTINS), "nn", "return_types", "evaluate", "Program", "compile", "load_program",
           "onnx", "torch", "spmd", "Mesh", "shard", "RefcompError", "ShapeError", "BindingError", "FeedError", "AllocationError",
           "CacheError"]
