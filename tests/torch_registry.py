"""The registry of torch-comparison cases behind docs/api.md (issue 28: no silent difference from PyTorch).

Every entry of api.md whose PyTorch column is not "—" is a key, "<section>.<name>": `rc.max`,
`Tensor.max`, `nn.softmax`, `Tensor.+`, `Tensor.x[ids]`. The modules `torch_cases_*.py` register, per
key, calls of the refcomp entry written the PyTorch way (positional forms and defaults included) beside
the same call in PyTorch, on seeded random inputs with the special values where they mean something; or
a refusal, where refcomp raises a RefcompError naming the difference. tests/test_torch_cases.py runs
them on the reference (a flagged subset also compiled, on the emulator), and tests/test_api_docs.py
fails for an entry that has none.
"""
from __future__ import annotations

import importlib
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import refcomp as rc
from refcomp.ops.graph import toposort
from api_helpers import torch

MODULES = (
    "torch_cases_math",
    "torch_cases_reduce",
    "torch_cases_shapes",
    "torch_cases_rc",
    "torch_cases_nn",
    "torch_cases_random",
    "torch_cases_methods",
    "torch_cases_aliases",
)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]
DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"
SECTIONS = {"Creation and functions": "rc", "Tensor methods": "Tensor", "`rc.nn`": "nn"}


@dataclass(frozen=True)
class A:
    """An input: float32 uniform in [lo, hi) with the special values spread in (edges=True), or int32
    ids below `high` (ids=True). Shape entries may be dim names, bound by the case's `dims`."""
    shape: tuple
    lo: float = -3.0
    hi: float = 3.0
    edges: bool = False
    ids: bool = False
    high: int = 4
    distinct: bool = False  # ids: distinct ones (a permutation's first entries), as index_copy needs
    values: Optional[tuple] = None  # these values (float32), not random ones

    def array(self, rng, dims) -> np.ndarray:
        shape = tuple(dims[n] if isinstance(n, str) else n for n in self.shape)
        if self.values is not None:
            return np.array(self.values, np.float32).reshape(shape)
        if self.ids and self.distinct:
            return rng.permutation(self.high)[:int(np.prod(shape))].reshape(shape).astype(np.int32)
        if self.ids:
            return rng.integers(0, self.high, shape).astype(np.int32)
        a = rng.uniform(self.lo, self.hi, shape).astype(np.float32)
        if self.edges and a.size:
            spots = rng.choice(a.size, size=min(a.size, len(SPECIAL)), replace=False)
            a.flat[spots] = np.array(SPECIAL[:len(spots)], np.float32)
        return a


def a(*shape, **kw) -> A:
    return A(tuple(shape), **kw)


@dataclass
class Case:
    key: str
    ours: Callable  # rc tensors -> a tensor, a tuple of them, or a plain value (size(), numel())
    theirs: Optional[Callable]  # torch tensors -> the same; None for a refusal
    inputs: tuple = ()
    rtol: float = 2e-6
    atol: float = 1e-6
    exact: bool = False  # compare with PyTorch in float32, bit for bit (NaN where NaN)
    emulate: bool = False  # also compile it and run it on the emulator
    dims: dict = field(default_factory=dict)
    refuses: tuple = ()  # words the RefcompError must say
    index: int = 0  # among the cases of its key

    def arrays(self) -> list:
        rng = np.random.default_rng(zlib.crc32(f"{self.key}/{self.index}".encode()))
        return [spec.array(rng, self.dims) for spec in self.inputs]

    @property
    def id(self) -> str:
        return f"{self.key}#{self.index}"


CASES: dict[str, list[Case]] = {}


def case(key: str, ours, theirs, *inputs: A, **kw) -> None:
    cases = CASES.setdefault(key, [])
    cases.append(Case(key, ours, theirs, tuple(inputs), index=len(cases), **kw))


def refusal(key: str, call, *words: str, inputs=()) -> None:
    """`call` (of rc inputs) must raise a RefcompError saying each of `words`: PyTorch means something
    refcomp cannot do, and says so."""
    case(key, call, None, *inputs, refuses=words)


def all_cases() -> dict[str, list[Case]]:
    for module in MODULES:
        importlib.import_module(module)
    return CASES


# --- running one case ---------------------------------------------------------------------------------
def rc_inputs(c: Case, prefix: str = "a") -> list:
    return [
        rc.input(f"{prefix}{i}", spec.shape, "int32" if spec.ids else "float32")
        for i, spec in enumerate(c.inputs)
    ]


def torch_inputs(c: Case, arrays: list) -> list:
    dtype = torch.float32 if c.exact else torch.float64
    return [
        torch.from_numpy(x).long() if x.dtype == np.int32 else torch.from_numpy(x).to(dtype) for x in arrays
    ]


def flatten(value) -> list:
    """Tensors (ours or PyTorch's) and plain values of a result, in order: a named pair's fields too."""
    if isinstance(value, (tuple, list)) and not (
        value and all(isinstance(v, (int, np.integer)) for v in value)
    ):
        return [v for item in value for v in flatten(item)]
    return [value]


def as_array(value) -> object:
    if torch is not None and isinstance(value, torch.Tensor):
        if value.dtype in (torch.int64, torch.int32, torch.float64):  # exact types compare as they are
            return value.detach().numpy()
        return value.detach().to(torch.float64).numpy()
    return value


def compare(c: Case, got: list, want: list) -> None:
    assert len(got) == len(want), f"{c.id}: {len(got)} results, PyTorch {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        w = as_array(w)
        if not isinstance(w, np.ndarray):  # size(), numel(), dim(): plain values, dims included
            assert tuple(g) == tuple(w) if isinstance(w, (tuple, list)) else g == w, (c.id, k, g, w)
            continue
        g = np.asarray(g)
        assert g.shape == w.shape, f"{c.id} result {k}: shape {g.shape}, PyTorch {w.shape}"
        if g.dtype in (np.int64, np.int32, np.float64):  # our exact types: PyTorch's type and values
            assert g.dtype == w.dtype, f"{c.id} result {k}: dtype {g.dtype}, PyTorch {w.dtype}"
            if c.exact or g.dtype != np.float64:
                np.testing.assert_array_equal(g, w, err_msg=f"{c.id} result {k}")
            else:  # a float64 exp or sum in another order: within a few ulp
                np.testing.assert_allclose(g, w, rtol=min(c.rtol, 1e-12), err_msg=f"{c.id} result {k}")
        elif c.exact:
            np.testing.assert_array_equal(g, w.astype(np.float32), err_msg=f"{c.id} result {k}")
        else:
            np.testing.assert_allclose(
                g, w, rtol=c.rtol, atol=c.atol, equal_nan=True, err_msg=f"{c.id} result {k}"
            )


def feeds_for(tensors: list, arrays: list, prefix: str = "a") -> dict:
    """The arrays of the inputs these tensors read (a case's call may leave an input unread)."""
    read = {n.attrs["name"] for n in toposort([t.node for t in tensors]) if n.op.name == "Input"}
    return {f"{prefix}{i}": x for i, x in enumerate(arrays) if f"{prefix}{i}" in read}


def split_results(ours) -> tuple[list, list]:
    """(indices of the tensor results, all results) of a refcomp call."""
    items = flatten(ours)
    return [k for k, v in enumerate(items) if isinstance(v, rc.Tensor)], items


# --- api.md ---------------------------------------------------------------------------------------------
def _outside_parentheses(text: str) -> str:
    """The text without parenthesised asides outside backticks (`max_pool1d` (`dilation`, ...))."""
    out, depth, quoted = [], 0, False
    for ch in text:
        if ch == "`" and not depth:
            quoted = not quoted
        if not quoted and ch == "(":
            depth += 1
        if not depth:
            out.append(ch)
        if not quoted and ch == ")" and depth:
            depth -= 1
    return "".join(out)


def doc_entries(text: Optional[str] = None) -> dict[str, str]:
    """Every api.md entry with a PyTorch counterpart, key -> its table row."""
    text = DOC.read_text() if text is None else text
    entries, section = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            section = next((s for title, s in SECTIONS.items() if line[3:].startswith(title)), None)
            continue
        if section is None or not line.startswith("| ") or line.startswith(("| refcomp", "| ---")):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[1] == "—":
            continue
        for span in re.findall(r"`([^`]+)`", _outside_parentheses(cells[0])):
            span = span.replace("\\|", "|")
            if span.startswith("x["):
                names = [span]
            elif re.match(r"[A-Za-z_]", span):
                names = [re.match(r"[A-Za-z_]\w*", span).group()]
            else:
                names = span.split()
            for name in names:
                entries[f"{section}.{name}"] = line
    return entries
