"""refcomp: a readable reference compiler for tensor programs that emits CUDA."""
__version__ = "0.1.0"  # the fallback for `refcomp --version` when the distribution is not installed; keep equal to pyproject.toml
from .errors import AllocationError, BindingError, CacheError, FeedError, RefcompError, ShapeError
from .ops.tensor import Tensor, constant, input
from .ops.movement import concat, stack
from .ops.elementwise import fmod, maximum, minimum, where
from .ops.reductions import arange
from .ops.linalg import einsum
from .ops.creation import eye, full, full_like, linspace, ones, ones_like, zeros, zeros_like
from .ops.trigonometry import atan2
from .ops.special import ceil, erf, erfc, expm1, floor, log1p, tanh
from .ops import nn
from .exec.reference import evaluate
from .exec.program import Program, load_program
from .compiler import compile
from . import onnx  # the onnx package itself is imported only when a model is first imported
from . import spmd
from .spmd import Mesh, shard

__all__ = ["Tensor", "input", "constant", "concat", "stack", "where", "maximum", "minimum", "fmod",
           "erf", "erfc", "tanh", "expm1", "log1p", "floor", "ceil",
           "arange", "einsum", "atan2", "eye", "full", "full_like", "linspace", "ones", "ones_like", "zeros",
           "zeros_like", "nn", "evaluate", "Program", "compile", "load_program", "onnx", "spmd", "Mesh", "shard", "RefcompError", "ShapeError",
           "BindingError", "FeedError", "AllocationError", "CacheError"]
