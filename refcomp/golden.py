"""Golden cases: small programs with stored inputs and expected outputs, and the code that checks them.

A `GoldenCase` (defined here, collected in `golden/cases.py` at the repository root) builds a graph
with named outputs, draws its inputs from a seeded generator, and carries an *independent* NumPy
float64 oracle. For each binding of its symbolic dims, `golden_update.update()` stores one file

    golden/data/<name>__<i>.npz   keys: in.<input>   the fed arrays (float32, or int32 ids)
                                        dims.<sym>   the binding
                                        out.<output> the expected outputs, float64, computed by
                                                     rc.evaluate(..., precision="float64")

and refuses to store outputs that disagree with the oracle, so the data never only agrees with
itself. `check()` re-evaluates every case and compares with the stored outputs: in float64 within
`FLOAT64_TOLERANCE`, in float32 within `FLOAT32_TOLERANCE` (the one float32 tolerance every backend,
the CUDA one included, is held to). `compare()` is the reusable comparison.

The golden folder is `<repo>/golden`, or `$REFCOMP_GOLDEN_DIR` when set.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
    from .ops.tensor import Tensor

# float32 evaluation against the float64 expectation, with np.testing.assert_allclose semantics:
# |got - want| <= atol + rtol * |want|. On the stored cases the NumPy reference in float32 uses at
# most ~3% of this budget (worst: a K=16 batched matmul and the 32-64-10 MLP, max abs error 2.6e-6
# on O(10) values; relative error <= 1.5e-5 on values above 1e-2), and tests/test_golden.py keeps it
# under a quarter. The rest is headroom for backends that sum in another order (sequential or
# tiled float32 accumulation) or use exp2f/log2f/sinf within a few ulp rather than NumPy's.
FLOAT32_TOLERANCE = dict(rtol=1e-4, atol=1e-5)
# float64 evaluation against the stored float64 expectation: only summation-order noise is allowed.
FLOAT64_TOLERANCE = dict(rtol=1e-12, atol=1e-12)
# The stored (refcomp, float64) outputs against each case's independent NumPy oracle. Looser than
# FLOAT64_TOLERANCE because the formulas differ (exp as exp2(x*log2 e), cos as sin(x + pi/2), ...).
ORACLE_TOLERANCE = dict(rtol=1e-9, atol=1e-9)

# Cases that store tensors in 16 bits (GoldenCase.storage), against their float64 expectation and
# their oracle: evaluation in float32 (or another formula) may land a rounding one unit in the last
# place away, 2^-11 (float16) or 2^-8 (bfloat16) relative, and what follows carries it. On the
# stored cases the float32 reference uses at most a quarter of this (tests/test_golden.py).
STORAGE_TOLERANCE = {"float16": dict(rtol=4e-3, atol=2e-3), "bfloat16": dict(rtol=3e-2, atol=1.6e-2)}

PRECISIONS = ("float64", "float32")
_NAME = re.compile(r"[a-z][a-z0-9_]*")  # fullmatch: `$` would allow a final newline


@dataclass(frozen=True)
class GoldenCase:
    name: str  # unique, snake_case, used as file name
    build: Callable[[], dict[str, "Tensor"]]  # builds the graph; returns NAMED outputs
    make_inputs: Callable[
        [np.random.Generator, dict[str, int]], dict[str, np.ndarray]
    ]  # feeds at a binding (float32; int32 ids)
    oracle: Callable[
        [dict[str, np.ndarray]], dict[str, np.ndarray]
    ]  # INDEPENDENT NumPy float64 formula; same keys as build()
    bindings: tuple[dict[str, int], ...] = (
        {},
    )  # symbolic cases: at least two bindings, e.g. ({"T": 5}, {"T": 12})
    tags: tuple[str, ...] = ()  # e.g. ("primitive",), ("view",), ("nn",), ("symbolic",), ("model",)
    storage: str = "float32"  # the narrowest float type its graph stores ("float16", "bfloat16")

    @property
    def symbolic(self) -> bool:
        return any(self.bindings)


@dataclass(frozen=True)
class Failure:
    """One thing wrong with one case (at one binding, in one precision where that applies)."""

    case: str
    index: Optional[int]
    what: str  # "float64", "float32", "oracle", "data"
    messages: tuple[str, ...]

    def __str__(self) -> str:
        where = self.case if self.index is None else f"{self.case}[{self.index}]"
        return f"{where} ({self.what}): " + "; ".join(self.messages)


# --- locating and loading ------------------------------------------------------------------------
def default_golden_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "golden"


def golden_dir() -> Path:
    """The golden folder: $REFCOMP_GOLDEN_DIR if set, else <repo>/golden (read at every call)."""
    override = os.environ.get("REFCOMP_GOLDEN_DIR")
    return Path(override).resolve() if override else default_golden_dir()


def data_dir() -> Path:
    return golden_dir() / "data"


def data_path(case: GoldenCase, i: int) -> Path:
    return data_dir() / f"{case.name}__{i}.npz"


def _import_cases_module(directory: Path):
    """Import `<directory>/cases.py` as a package module (so its relative imports work)."""
    directory = directory.resolve()
    is_default = directory == default_golden_dir()
    name = "golden" if is_default else f"_refcomp_golden_{zlib.crc32(str(directory).encode()):08x}"
    package = sys.modules.get(name)
    if package is None or [str(Path(p).resolve()) for p in getattr(package, "__path__", [])] != [
        str(directory)
    ]:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                      submodule_search_locations=[str(directory)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    return importlib.import_module(name + ".cases")


def load_cases() -> list[GoldenCase]:
    """Every golden case, from the golden folder's cases.py (the repository's when the folder has none)."""
    directory = golden_dir()
    if not (directory / "cases.py").exists():
        directory = default_golden_dir()
    cases = list(_import_cases_module(directory).CASES)
    seen: set[str] = set()
    for case in cases:
        if not isinstance(case, GoldenCase):
            raise TypeError(f"golden CASES holds {case!r}, not a GoldenCase")
        if not isinstance(case.name, str) or not _NAME.fullmatch(case.name) or "__" in case.name:
            raise ValueError(f"golden case name {case.name!r} must be snake_case without '__'")
        if case.name in seen:
            raise ValueError(f"golden case name {case.name!r} is used twice")
        if not case.bindings:
            raise ValueError(f"golden case {case.name!r} has no bindings (use ({{}},) for a concrete case)")
        seen.add(case.name)
    return cases


class UnknownCaseError(KeyError):
    """A case name that no golden case has."""


def select(cases: Sequence[GoldenCase], names: Optional[Iterable[str]]) -> list[GoldenCase]:
    if not names:
        return list(cases)
    names = list(names)
    by_name = {c.name: c for c in cases}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UnknownCaseError(f"no golden case named {', '.join(map(repr, unknown))}")
    return [by_name[n] for n in names]


# --- generating -----------------------------------------------------------------------------------
def seed_of(case: GoldenCase, i: int) -> int:
    return zlib.crc32(f"{case.name}__{i}".encode())


def make_feeds(case: GoldenCase, i: int) -> dict[str, np.ndarray]:
    """The case's inputs at binding i, drawn from its deterministic seed (float32, or int32 ids)."""
    rng = np.random.default_rng(seed_of(case, i))
    feeds = {}
    for name, value in case.make_inputs(rng, dict(case.bindings[i])).items():
        array = np.asarray(value)
        if array.dtype.kind in "iu":
            feeds[name] = np.ascontiguousarray(array, dtype=np.int32)
        elif array.dtype.kind == "f":
            feeds[name] = np.ascontiguousarray(array, dtype=np.float32)
        else:
            raise TypeError(f"golden case {case.name!r}: input {name!r} has dtype {array.dtype}")
    return feeds


def evaluate_case(
    case: GoldenCase, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int], precision: str
) -> dict[str, np.ndarray]:
    from .reference.reference import evaluate
    outputs = case.build()
    if not isinstance(outputs, dict):
        raise TypeError(f"golden case {case.name!r}: build() must return a dict of named outputs")
    return evaluate(outputs, dict(feeds), dims=dict(dims), precision=precision)


def run_oracle(case: GoldenCase, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    with np.errstate(all="ignore"):
        return {
            k: np.asarray(v, dtype=np.float64)
            for k, v in case.oracle({k: v.copy() for k, v in feeds.items()}).items()
        }


def as_stored(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    return value.astype(np.float64) if value.dtype.kind == "f" else value


# --- stored data ----------------------------------------------------------------------------------
def read_data(path) -> dict[str, dict]:
    """A data file's parts by kind: "in", "dims", "out", and "meta" (strings) where the file has
    any (a user's case from `refcomp golden add` names its FILE.py:FUNCTION there)."""
    with np.load(Path(path), allow_pickle=False) as z:
        parts: dict[str, dict] = {"in": {}, "dims": {}, "out": {}}
        for key in z.files:
            kind, _, name = key.partition(".")
            parts.setdefault(kind, {})[name] = z[key]
    parts["dims"] = {k: int(v) for k, v in parts["dims"].items()}
    if "meta" in parts:
        parts["meta"] = {k: str(v) for k, v in parts["meta"].items()}
    return parts


def write_data(
    path, feeds: Mapping, dims: Mapping, outputs: Mapping, meta: Optional[Mapping[str, str]] = None
) -> None:
    """Write one data file in the layout above (outputs stored as float64), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"in.{k}": v for k, v in feeds.items()}
    arrays.update({f"dims.{k}": np.asarray(int(v), dtype=np.int64) for k, v in dims.items()})
    arrays.update({f"out.{k}": as_stored(v) for k, v in outputs.items()})
    arrays.update({f"meta.{k}": np.asarray(str(v)) for k, v in (meta or {}).items()})
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def case_feeds(case: GoldenCase, i: int) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The stored feeds and dim binding of binding i of `case`."""
    parts = read_data(data_path(case, i))
    return parts["in"], parts["dims"]


def expected(case: GoldenCase, i: int) -> dict[str, np.ndarray]:
    """The stored expected outputs (float64) of binding i of `case`."""
    return read_data(data_path(case, i))["out"]


def stored_files() -> list[Path]:
    directory = data_dir()
    return sorted(directory.glob("*.npz")) if directory.is_dir() else []


# --- comparing ------------------------------------------------------------------------------------
def compare(
    got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], tol: Mapping[str, float]
) -> list[str]:
    """Human-readable mismatches between two dicts of arrays, with np.testing.assert_allclose
    semantics (|got - want| <= atol + rtol*|want|, NaN equal to NaN); [] when they agree."""
    rtol, atol = float(tol.get("rtol", 0.0)), float(tol.get("atol", 0.0))
    problems = []
    for name in sorted(set(want) - set(got)):
        problems.append(f"output {name!r} is missing (got outputs {sorted(got)})")
    for name in sorted(set(got) - set(want)):
        problems.append(f"output {name!r} is not expected (expected outputs {sorted(want)})")
    for name in [n for n in want if n in got]:
        g, w = np.asarray(got[name]), np.asarray(want[name])
        if g.shape != w.shape:
            problems.append(f"output {name!r}: shape {g.shape} != expected {w.shape}")
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        with np.errstate(all="ignore"):
            finite = np.isfinite(g64) & np.isfinite(w64)
            diff = np.where(finite, np.abs(g64 - w64), 0.0)
            # non-finite values must match exactly (NaN with NaN, inf with the same inf), as in
            # assert_allclose
            same = (np.isnan(g64) & np.isnan(w64)) | (np.isinf(w64) & (g64 == w64))
            bad = np.where(finite, diff > atol + rtol * np.abs(w64), ~same)
            diff = np.where(bad & ~finite, np.inf, diff)
            rel = np.where(bad, diff / np.abs(w64), 0.0)
        if not bad.any():
            continue
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
        problems.append(
            f"output {name!r}: {int(bad.sum())} of {bad.size} elements differ beyond "
            f"rtol={rtol:g}, atol={atol:g}; "
            f"max abs err {float(diff.max()):.3g} at {worst} (got {g64[worst]:.9g}, want {w64[worst]:.9g}); "
            f"max rel err {float(np.nanmax(rel)):.3g}; "
            f"first bad index {first} (got {g64[first]:.9g}, want {w64[first]:.9g})"
        )
    return problems


def tolerance(precision: str) -> dict[str, float]:
    return {"float64": FLOAT64_TOLERANCE, "float32": FLOAT32_TOLERANCE}[precision]


def case_tolerance(case: GoldenCase, what: str = "float32") -> dict[str, float]:
    """What `case` is held to in float32 (every backend) or against its "oracle": FLOAT32_TOLERANCE
    or ORACLE_TOLERANCE, or STORAGE_TOLERANCE for a case that stores 16-bit tensors."""
    if case.storage in STORAGE_TOLERANCE and what in ("float32", "oracle"):
        return STORAGE_TOLERANCE[case.storage]
    return ORACLE_TOLERANCE if what == "oracle" else tolerance(what)


# --- check ----------------------------------------------------------------------------------------
def check(precision="both", names: Optional[Iterable[str]] = None, oracle: bool = False,
          cases: Optional[Sequence[GoldenCase]] = None) -> list[Failure]:
    """Re-evaluate the golden cases and compare with the stored outputs; [] when everything agrees.

    `precision` is "float64", "float32", "both" or a sequence of them. `names` restricts the check
    to those cases (and then skips the search for stray data files). `oracle=True` also compares
    the stored outputs with each case's independent oracle. Stale data (a binding or inputs that no
    longer match the case's definition) and missing or stray data files are failures too.
    """
    precisions = (
        PRECISIONS
        if precision == "both"
        else (precision,)
        if isinstance(precision, str)
        else tuple(precision)
    )
    for p in precisions:
        tolerance(p)
    cases = select(load_cases() if cases is None else cases, names)
    failures: list[Failure] = []
    for case in cases:
        for i, binding in enumerate(case.bindings):
            path = data_path(case, i)
            if not path.exists():
                failures.append(
                    Failure(case.name, i, "data", (f"no data file {path.name}; run `refcomp golden update`",))
                )
                continue
            parts = read_data(path)
            feeds, dims, want = parts["in"], parts["dims"], parts["out"]
            stale = _staleness(case, i, feeds, dims)
            if stale:
                failures.append(
                    Failure(case.name, i, "data", tuple(stale) + ("run `refcomp golden update`",))
                )
                continue
            for p in precisions:
                try:
                    got = evaluate_case(case, feeds, dims, p)
                except Exception as e:  # noqa: BLE001 - a failing case is reported, not raised
                    failures.append(Failure(case.name, i, p, (f"evaluation raised {type(e).__name__}: {e}",)))
                    continue
                problems = compare(got, want, case_tolerance(case, p))
                if problems:
                    failures.append(Failure(case.name, i, p, tuple(problems)))
            if oracle:
                problems = compare(want, run_oracle(case, feeds), case_tolerance(case, "oracle"))
                if problems:
                    failures.append(Failure(case.name, i, "oracle", tuple(problems)))
    if not names:
        known = {data_path(c, i).name for c in cases for i in range(len(c.bindings))}
        for path in stored_files():
            if path.name not in known:
                failures.append(
                    Failure(
                        path.stem,
                        None,
                        "data",
                        (f"stray data file {path.name} belongs to no case; run `refcomp golden update`",),
                    )
                )
    return failures


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape, dtype and values, NaN equal to NaN (inputs may plant NaN on purpose)."""
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def _staleness(case: GoldenCase, i: int, feeds: Mapping, dims: Mapping) -> list[str]:
    problems = []
    if dict(dims) != {k: int(v) for k, v in case.bindings[i].items()}:
        problems.append(f"stored binding {dict(dims)} != the case's binding {dict(case.bindings[i])}")
    fresh = make_feeds(case, i)
    if set(fresh) != set(feeds):
        problems.append(f"stored inputs {sorted(feeds)} != the case's inputs {sorted(fresh)}")
    else:
        changed = [k for k in fresh if not same_array(fresh[k], feeds[k])]
        if changed:
            problems.append(f"stored inputs {changed} differ from what the case's make_inputs draws now")
    return problems


def data_size() -> int:
    """Total bytes of the stored golden data."""
    return sum(p.stat().st_size for p in stored_files())
