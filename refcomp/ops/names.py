"""The names of the rc.* function tables, as plain data with no imports.

`import refcomp` lists these names (for `__all__`, `dir(rc)` and its lazy `__getattr__`) without
importing the ops behind them, which would import SymPy and NumPy (issue 32: start-up). The tables
themselves are built from these tuples in functions.py and random_tensors.py.
"""

# torch.* functions that are Tensor methods: rc.exp(x) is x.exp() (functions.py)
METHODS = (
    "abs",
    "exp",
    "exp2",
    "log",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "neg",
    "sigmoid",
    "relu",
    "sin",
    "cos",
    "tan",
    "sign",
    "trunc",
    "round",
    "isnan",
    "isinf",
    "isfinite",
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "lerp",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "clamp",
    "clip",
    "masked_fill",
    "sum",
    "mean",
    "prod",
    "amax",
    "amin",
    "max",
    "min",
    "argmax",
    "argmin",
    "var",
    "std",
    "logsumexp",
    "softmax",
    "log_softmax",
    "cumsum",
    "matmul",
    "tril",
    "triu",
    "numel",
    "reshape",
    "flatten",
    "squeeze",
    "unsqueeze",
    "permute",
    "transpose",
    "swapaxes",
    "t",
    "flip",
    "split",
    "chunk",
    "gather",
    "index_select",
    "index_copy",
    "diagonal",
)

# functions.FUNCTIONS: the methods above, and mm and bmm (matmul with PyTorch's rank checks)
FUNCTIONS = METHODS + ("mm", "bmm")

# the dtype names PyTorch users write: rc.float32 is "float32" (functions.DTYPES)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "bool")

# random_tensors.FUNCTIONS: rc.rand, rc.randn, ...
RANDOM = (
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "randint_like",
    "normal",
    "bernoulli",
    "multinomial",
)
