"""`refcomp run`, and what every command shares: naming a target, parsing --dims and --feeds.

A TARGET is a golden case name or FILE.py:FUNCTION (the function returns a Tensor, a list or a
dict of them). `run` compiles it, runs it once on a backend with given or random feeds, compares
with the float64 reference at golden's float32 tolerance and times each kernel launch. Mistakes a
user can make here raise `UsageError`, which the command line prints as one line (exit 2).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
import time
import traceback
import zipfile
import zlib
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from . import golden
from .cli_select import UsageError, did_you_mean
from .errors import RefcompError
from .measure import CHECK_DIM_CAP, make_feeds
from .ops.graph import flatten_outputs, symbols_of, toposort
from .progress import stage

UNBOUND_DIM = CHECK_DIM_CAP  # a symbol left out of --dims (random feeds): small, so the reference stays quick


# --- targets -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Target:
    outputs: object  # what the function returned: a Tensor, a list or a dict of them
    case: Optional[golden.GoldenCase] = None  # when TARGET names a golden case


def load_target(text: str) -> Target:
    """The outputs TARGET names: FILE.py:FUNCTION, or a golden case name. A function returning a
    tuple names its first item (examples/gpt2_block.py:build_block returns (output, weights))."""
    if ":" in text:
        path, func = text.rsplit(":", 1)
        built = call_in_file(path, func)
        return Target(built[0] if isinstance(built, tuple) else built)
    cases = {c.name: c for c in golden.load_cases()}
    if text not in cases:
        raise UsageError(f"{text!r} is neither FILE.py:FUNCTION nor a golden case{did_you_mean(text, cases)} "
                         f"(see `refcomp golden list`)")
    return Target(cases[text].build(), cases[text])


def call_in_file(path: str, func: str):
    """Import FILE.py (its folder first on sys.path, as `python FILE.py` has it) and call FUNCTION()."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no such file: {path!r}")
    name = f"refcomp_target_{zlib.crc32(str(file.resolve()).encode()):08x}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path!r} (a Python file ending in .py is expected)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    sys.path.insert(0, str(file.resolve().parent))
    try:
        _user_code(spec.loader.exec_module, module, what=f"importing {path}", file=file)
    finally:
        sys.path.remove(str(file.resolve().parent))
    function = getattr(module, func, None)
    if not callable(function):
        defined = sorted(
            k for k, v in vars(module).items() if callable(v) and getattr(v, "__module__", None) == name
        )
        raise UsageError(f"{path} has no function {func!r} (it defines: {', '.join(defined) or 'none'})")
    return _user_code(function, what=f"{path}:{func}()", file=file)


def _user_code(call, *args, what: str, file: Path):
    """Run the user's code; its exception becomes one line naming where in their file it was raised.
    A RefcompError (a shape mistake in their graph) passes through: it already says what is wrong."""
    try:
        return call(*args)
    except RefcompError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything the user's code raises is reported, not a crash
        frames = [
            f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == file.resolve()
        ]
        where = f" at {file.name}:{frames[-1].lineno}" if frames else ""
        raise UsageError(f"{what} raised {type(exc).__name__}{where}: {exc}") from None


def named(values) -> dict[str, np.ndarray]:
    """Outputs by name: a dict's keys, out0, out1 ... for a list, y for one array (golden's name)."""
    if isinstance(values, dict):
        return {str(k): np.asarray(v) for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return {f"out{i}": np.asarray(v) for i, v in enumerate(values)}
    return {"y": np.asarray(values)}


def graph_symbols(outputs) -> list[str]:
    tensors, _ = flatten_outputs(outputs)
    return sorted(s.name for s in symbols_of(toposort([t.node for t in tensors]), [t.edge for t in tensors]))


def storage_of(outputs) -> str:
    """The narrowest float type the graph stores (GoldenCase.storage): it picks the tolerance."""
    tensors, _ = flatten_outputs(outputs)
    dtypes = {n.dtype for n in toposort([t.node for t in tensors])}
    return next((d for d in ("bfloat16", "float16") if d in dtypes), "float32")


def float32_tolerance(outputs) -> dict[str, float]:
    return golden.STORAGE_TOLERANCE.get(storage_of(outputs), golden.FLOAT32_TOLERANCE)


# --- --dims and --feeds --------------------------------------------------------------------------
def parse_dims(tokens: Optional[Sequence[str]], option: str = "--dims") -> dict[str, int]:
    """`B=2,T=7`, `B=2 T=7` (separate arguments) or both mixed -> {"B": 2, "T": 7}."""
    out: dict[str, int] = {}
    for token in tokens or ():
        for pair in token.replace(",", " ").split():
            name, eq, value = pair.partition("=")
            if not (
                eq and name.isidentifier() and re.fullmatch(r"[0-9]+", value)
            ):  # isdigit() takes '²', int() not
                raise UsageError(f"{option} takes NAME=INT pairs (B=2,T=7 or B=2 T=7), got {pair!r}")
            out[name] = int(value)
    return out


def load_feeds(path: str) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Feeds from an .npz: arrays keyed by input name, or golden's layout (in.<input>, dims.<sym>),
    so a stored golden or `golden add` file can be fed as it is. The file is untrusted: it is read
    without pickles, and anything but an archive of arrays with integer dims is a UsageError."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a .npy: one bare array
            raise UsageError(
                f"--feeds {path}: a .npy file holds one unnamed array; save the feeds by input name "
                f"with np.savez"
            )
        with loaded as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise UsageError(f"no such feeds file: {path!r}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise UsageError(f"--feeds {path}: not a readable .npz file ({exc})") from None
    for key, value in arrays.items():
        if not isinstance(value, np.ndarray):
            raise UsageError(f"--feeds {path}: entry {key!r} is not a NumPy array (.npy) in the archive")
    if any(k.startswith("in.") for k in arrays):
        feeds = {k[3:]: v for k, v in arrays.items() if k.startswith("in.")}
        return feeds, {k[5:]: _stored_dim(path, k, v) for k, v in arrays.items() if k.startswith("dims.")}
    return arrays, {}


def _stored_dim(path: str, key: str, value: np.ndarray) -> int:
    """A `dims.<sym>` entry's value: one non-negative integer, as golden stores it."""
    if value.ndim != 0 or value.dtype.kind not in "iu" or int(value) < 0:
        shown = (
            f"an array of dtype {value.dtype} and shape {value.shape}"
            if value.ndim
            else f"{value.item()!r} ({value.dtype})"
        )
        raise UsageError(f"--feeds {path}: {key!r} must be one non-negative integer (the value of dim "
                         f"{key[5:]!r}), got {shown}")
    return int(value)


def target_dims(target: Target, dims_tokens) -> dict[str, int]:
    """--dims parsed and held to the graph: naming a dim it does not have is a UsageError."""
    dims = parse_dims(dims_tokens)
    symbols = graph_symbols(target.outputs)
    unknown = [k for k in dims if k not in symbols]
    if unknown:
        raise UsageError(
            f"--dims names {', '.join(unknown)}, not a dimension of this graph "
            f"(its dims: {', '.join(symbols) or 'none'})"
        )
    return dims


def feeds_for(
    target: Target, feeds_file: Optional[str], dims: Mapping[str, int], binding: int = 0
) -> tuple[dict, dict, str]:
    """(feeds, dims, where they came from): the file's; a golden case's own generator (at its stored
    binding number `binding`, with --dims over it); else random, every unbound symbol at
    UNBOUND_DIM. `run` and `profile` both take their defaults from here, so they agree."""
    if feeds_file:
        feeds, stored = load_feeds(feeds_file)
        return feeds, {**stored, **dims}, f"feeds from {feeds_file}"
    if target.case is not None:
        count = len(target.case.bindings)
        if not 0 <= binding < count:
            raise UsageError(f"{target.case.name} has bindings 0 to {count - 1}, not {binding}")
        case, binding = (target.case, binding) if not dims else \
            (dataclasses.replace(target.case, bindings=({**target.case.bindings[binding], **dims},)), 0)
        return (
            golden.make_feeds(case, binding),
            dict(case.bindings[binding]),
            "random feeds (the golden case's generator)",
        )
    dims = {**{s: UNBOUND_DIM for s in graph_symbols(target.outputs)}, **dims}
    return (
        make_feeds(target.outputs, dims, seed=0),
        dims,
        "random feeds (standard normal, ids in range; seed 0)",
    )


# --- run -----------------------------------------------------------------------------------------
def run_command(
    target_text: str,
    backend: Optional[str],
    feeds_file: Optional[str],
    dims_tokens,
    search: bool,
    profile: bool,
    out=print,
) -> int:
    """`refcomp run`: 0 when every output agrees with the float64 reference, 1 otherwise."""
    from .compiler import compile as compile_program
    from .exec.backends import BACKENDS, default_backend
    from .reference.reference import evaluate

    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    backend = backend or default_backend()
    target = load_target(target_text)
    feeds, dims, origin = feeds_for(target, feeds_file, target_dims(target, dims_tokens))
    program = compile_program(target.outputs, search=search, dims_hint=dims or None)
    dims = program.bind(feeds, dims)[1]  # with the dims the feeds fix, for the header and the reference
    got, times, clock = run_timed(program, feeds, dims, backend)
    want = named(evaluate(target.outputs, feeds, dims=dims, precision="float64"))
    got = named(got)
    binding = ", ".join(f"{k}={v}" for k, v in dims.items()) or "no symbolic dims"
    count = len(program.kernels)
    out(
        f"refcomp run {target_text} on {backend}: {count} kernel{'s' if count != 1 else ''}; "
        f"{binding}; {origin}"
    )
    ok = compare_outputs(got, want, float32_tolerance(target.outputs), out)
    out(kernel_table(times, clock))
    if profile:
        out(program.profile(feeds, dims=dims).table())
    out("PASS" if ok else "FAIL")
    return 0 if ok else 1


def compare_outputs(got: Mapping, want: Mapping, tol: Mapping[str, float], out=print) -> bool:
    """One line per output: shape, max abs error, PASS/FAIL; golden.compare decides (NaN = NaN)."""
    out(
        f"{'output':<16}{'shape':<20}{'max abs err':>12}  tolerance rtol={tol['rtol']:g} atol={tol['atol']:g}"
    )
    ok = True
    for name in want:
        problems = golden.compare({name: got[name]} if name in got else {}, {name: want[name]}, tol)
        ok &= not problems
        shape = tuple(np.shape(want[name]))
        out(f"{name:<16}{str(shape):<20}{max_abs_error(got.get(name), want[name]):>12.3g}  "
            + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return ok


def max_abs_error(got, want) -> float:
    """Largest |got - want| over the elements finite in both (NaN when an output is missing or misshapen)."""
    if got is None or np.shape(got) != np.shape(want):
        return float("nan")
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(all="ignore"):
        return float(np.max(np.abs(g - w), initial=0.0, where=np.isfinite(g) & np.isfinite(w)))


def run_timed(program, feeds: Mapping, dims: Mapping, backend: str):
    """Run once; return (outputs, [(kernel, launch, seconds)], how it was timed). The emulator is
    timed by host wall time around each launch; PyCUDA by CUDA events (exec.timing, median of 5
    rounds after the checked run); the numpy backend runs the reference interpreter, no kernels."""
    from .exec.backends import get_backend
    if backend == "numpy":
        start = time.perf_counter()
        values = program.run(feeds, backend="numpy", dims=dims)
        return (
            values,
            [],
            f"none: the numpy backend is the reference interpreter in float32, "
            f"{(time.perf_counter() - start) * 1e3:.3f} ms",
        )
    be = get_backend(backend)
    with stage("nvcc build", backend == "pycuda"):  # the emulator's g++ build reports itself
        module = be.load(program.source, [k.signature for k in program.kernels])
    bindings, buffers = program.prepare(be, feeds, dims)
    times = []
    for kernel, grid, block, args in program.launches(buffers, bindings):
        start = time.perf_counter()
        module.launch(kernel.name, grid, block, args)
        be.synchronize()
        times.append((kernel.name, f"{_dim3(grid)} x {_dim3(block)}", time.perf_counter() - start))
    values = program.download_outputs(be, buffers, bindings)
    if backend != "pycuda":
        return values, times, "host wall time around each launch"
    from .exec.timing import time_program
    timing = time_program(program, feeds, dims, repeats=5, warmup=1, per_kernel=True)
    return values, [(k, launch, s) for (k, s), (_, launch, _) in zip(timing.kernels, times)], \
        "CUDA events, median of 5 rounds, cold L2"


def _dim3(value) -> str:
    dims = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return ",".join(str(int(d)) for d in dims)


def kernel_table(times, clock: str) -> str:
    total = sum(s for _, _, s in times)
    if not times:
        return f"kernel times: {clock}"
    wide = max(len(name) for name, _, _ in times) + 2
    lines = [
        f"kernel times ({clock}):",
        f"{'kernel':<{wide}}{'launch (grid x block)':<26}{'ms':>10}{'share':>8}",
    ]
    for name, launch, seconds in times:
        lines.append(
            f"{name:<{wide}}{launch:<26}{seconds * 1e3:>10.3f}{seconds / total if total else 0:>8.0%}"
        )
    lines.append(f"{'total':<{wide + 26}}{total * 1e3:>10.3f}")
    return "\n".join(lines)
