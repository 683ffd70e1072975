"""refcomp: a readable reference compiler for tensor programs that emits CUDA."""
from .errors import AllocationError, BindingError, CacheError, FeedError, RefcompError, ShapeError
from .ops.tensor import Tensor, constant, input
from .ops.movement import concat, stack
from .ops.elementwise import fmod, maximum, minimum, where
from .ops.reductions import arange
from .ops.special import ceil, erf, erfc, expm1, floor, log1p, tanh
from .ops import nn
from .frontends import onnx  # imports the onnx package only when first used
from .exec.reference import evaluate

__all__ = ["Tensor", "input", "constant", "concat", "stack", "where", "maximum", "minimum", "fmod",
           "erf", "erfc", "tanh", "expm1", "log1p", "floor", "ceil",
           "arange", "nn", "evaluate", "RefcompError", "ShapeError", "BindingError", "FeedError", "AllocationError",
           "CacheError"]
from .codegen.program import Program, compile  # noqa: E402

__all__ += ["Program", "compile"]
