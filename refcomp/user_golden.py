"""Golden-output tests for a user's own model: `refcomp golden add` and `refcomp golden check --dir`.

`add FILE.py:FN --name NAME` stores one case as DIR/NAME.npz in golden's key layout (in.<input>,
dims.<sym>, out.<output>, see refcomp.golden) plus `meta.target`, the FILE.py:FN to rebuild the
graph from (FILE relative to DIR, so the folder can be committed beside the model). Inputs are
drawn as refcomp's golden cases draw theirs: from a generator seeded by the case's name (floats
standard normal, weights scaled by their fan-in, ids in range of their table; refcomp.measure);
the outputs are rc.evaluate's in float64.

`check --dir DIR` rebuilds every stored case and holds the reference to the stored outputs
(float64 within FLOAT64_TOLERANCE, float32 within FLOAT32_TOLERANCE) and the compiled program on a
backend within FLOAT32_TOLERANCE (STORAGE_TOLERANCE for a graph that stores 16-bit floats), so a
change to the model, to refcomp or to the backend that moves an output shows as a FAIL.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from . import golden
from .cli_run import call_in_file, graph_symbols, named, storage_of
from .cli_select import UsageError, did_you_mean
from .exec.backends import default_backend
from .measure import make_feeds
from .ops.tensor import Tensor

_NAME = re.compile(
    r"[A-Za-z_][A-Za-z0-9_.-]*"
)  # a file name on every system (fullmatch: `$` allows a final newline)


def user_outputs(target: str) -> dict:
    """The named outputs of FILE.py:FN: the dict it returns, or its one tensor as "y"."""
    path, colon, func = target.rpartition(":")
    if not colon or not path:
        raise UsageError(f"golden add takes FILE.py:FUNCTION, got {target!r}")
    built = call_in_file(path, func)
    if isinstance(built, Tensor):
        return {"y": built}
    if isinstance(built, dict) and built and all(isinstance(v, Tensor) for v in built.values()):
        return {str(k): v for k, v in built.items()}
    raise UsageError(
        f"{target} must return a dict of named output tensors or one tensor, got {type(built).__name__}"
    )


def as_case(name: str, outputs: dict, dims: Mapping[str, int]) -> golden.GoldenCase:
    """A GoldenCase over the user's graph, so golden's generator, evaluation and tolerances apply."""
    draw = lambda rng, binding: make_feeds(outputs, binding, seed=int(rng.integers(2**31)))
    return golden.GoldenCase(name, lambda: outputs, draw, oracle=lambda feeds: {}, bindings=(dict(dims),),
                             storage=storage_of(outputs))


# --- add -----------------------------------------------------------------------------------------
def add(target: str, name: str, directory: str, dims: Mapping[str, int], force: bool = False) -> str:
    """Store the case; returns what was stored, for the command line to print."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UsageError(f"--name {name!r}: use letters, digits, '_', '.' or '-' (it names the file)")
    path = Path(directory) / f"{name}.npz"
    if path.exists() and not force:
        raise UsageError(f"{path} exists (add --force to replace it)")
    outputs = user_outputs(target)
    unbound = [s for s in graph_symbols(outputs) if s not in dims]
    if unbound:
        raise UsageError(f"the graph has symbolic dims {', '.join(unbound)}: bind them with --dims "
                         + ",".join(f"{s}=..." for s in unbound))
    case = as_case(name, outputs, dims)
    feeds = golden.make_feeds(case, 0)
    want = golden.evaluate_case(case, feeds, dims, "float64")
    file, func = target.rsplit(":", 1)
    stored_target = (
        f"{Path(os.path.relpath(Path(file).resolve(), Path(directory).resolve())).as_posix()}:{func}"
    )
    golden.write_data(path, feeds, dims, want, meta={"target": stored_target})
    shapes = lambda arrays: ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items())
    binding = f" at {', '.join(f'{k}={v}' for k, v in dims.items())}" if dims else ""
    return (f"golden add: {path}: inputs {shapes(feeds)}; outputs {shapes(want)} (float64){binding}\n"
            f"check with: refcomp golden check --dir {directory}")


# --- check ---------------------------------------------------------------------------------------
@dataclass
class Checked:
    name: str
    passed: list[str] = field(default_factory=list)  # "float64", "float32", "emulator (2 kernels)"
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        if not self.failures:
            return f"PASS {self.name}: {', '.join(self.passed)}"
        return "\n".join(f"FAIL {self.name} {f}" for f in self.failures)


def check(directory: str, backend: Optional[str] = None, names: Optional[Sequence[str]] = None,
          precisions: Sequence[str] = golden.PRECISIONS, search: bool = True) -> list[Checked]:
    """Check every case stored in `directory` (or the named ones)."""
    from .exec.backends import BACKENDS, get_backend
    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    backend = backend or default_backend()
    if backend != "numpy":
        get_backend(backend)  # not usable here: one error now, not one failure per case
    files = stored_cases(directory)
    unknown = [n for n in names or () if n not in files]
    if unknown:
        raise UsageError(
            f"no stored case named {', '.join(map(repr, unknown))} in {directory}"
            f"{did_you_mean(unknown[0], files)}"
        )
    return [check_file(files[n], backend, precisions, search) for n in (names or files)]


def stored_cases(directory: str) -> dict[str, Path]:
    """The cases stored in `directory`, name -> file, sorted by name; none, or no folder, is a UsageError."""
    folder = Path(directory)
    if not folder.is_dir():
        raise UsageError(f"no such folder: {directory!r} (store cases with `refcomp golden add`)")
    files = {p.stem: p for p in sorted(folder.glob("*.npz"))}
    if not files:
        raise UsageError(f"{directory} holds no stored cases (store one with `refcomp golden add`)")
    return files


def check_file(path: Path, backend: str, precisions: Sequence[str], search: bool) -> Checked:
    result = Checked(path.stem)
    try:
        parts = golden.read_data(path)
        target = parts.get("meta", {}).get("target")
        if target is None:
            raise UsageError(f"{path.name} has no meta.target: it was not stored by `refcomp golden add`")
        file, func = target.rsplit(":", 1)
        outputs = user_outputs(f"{path.parent / file}:{func}")
    except Exception as exc:  # noqa: BLE001 - a case that cannot be rebuilt fails; the others are still checked
        result.failures.append(f"(load): {exc}")
        return result
    case = as_case(path.stem, outputs, parts["dims"])
    feeds, dims, want = parts["in"], parts["dims"], parts["out"]
    for precision in precisions:
        _check_one(
            result,
            precision,
            lambda: (precision, golden.evaluate_case(case, feeds, dims, precision)),
            want,
            golden.case_tolerance(case, precision),
        )
    _check_one(result, backend, lambda: _compiled(outputs, feeds, dims, backend, search), want,
               golden.case_tolerance(case, "float32"))
    return result


def _compiled(outputs, feeds, dims, backend: str, search: bool) -> tuple[str, dict[str, np.ndarray]]:
    from .compiler import compile as compile_program
    program = compile_program(outputs, search=search, dims_hint=dims or None)
    if backend == "numpy":
        return backend, named(program.run(feeds, backend=backend, dims=dims))
    count = len(program.kernels)
    return f"{backend} ({count} kernel{'s' if count != 1 else ''})", named(
        program.run(feeds, backend=backend, dims=dims)
    )


def _check_one(result: Checked, label: str, compute, want: Mapping, tol: Mapping) -> None:
    """compute() -> (label, outputs); a raise is this case's failure, reported under `label`."""
    try:
        label, got = compute()
        problems = golden.compare(got, want, tol)
    except Exception as exc:  # noqa: BLE001 - reported as this case's failure
        problems = [f"raised {type(exc).__name__}: {exc}"]
    if problems:
        result.failures.append(f"({label}): " + "; ".join(problems))
    else:
        result.passed.append(label)


def summary(results: Sequence[Checked], directory: str) -> str:
    bad = [r.name for r in results if r.failures]
    if not bad:
        return (
            f"golden check: {len(results)} case{'s' if len(results) != 1 else ''} in {directory}: all agree"
        )
    return f"golden check: {len(bad)} of {len(results)} cases failed in {directory}: {', '.join(bad)}"
