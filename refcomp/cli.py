"""The `refcomp` command line: `refcomp <command> [<subcommand>] ...`.

Commands are registered in `COMMANDS`, a table of name -> (help, setup). `setup(parser)` adds the
command's arguments (or its own subcommands) and sets `func` on the parser with
`parser.set_defaults(func=...)`; `func(args)` returns the exit status. To add a command, write a
setup function and add one line to the table.

Exit status: 0 success, 1 a check failed (`run`, `golden check`), 2 a usage mistake, a
RefcompError or an OSError (a path that cannot be read or written), printed as one line `refcomp: error: ...`
(REFCOMP_DEBUG=1 shows the traceback
instead), 141 when stdout is closed early (`refcomp explain X | head -1`): the status a shell
gives a C tool killed by SIGPIPE, so a pipeline under `set -o pipefail` sees the output was cut.
The progress display (refcomp.progress) is on here, in a pipe too, unless REFCOMP_PROGRESS=0.

`refcomp --version` and `--help` import nothing of the compiler (issue 32: start-up): each command
imports what it needs inside its function, cli_run (NumPy, the golden cases) included.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional, Sequence

from . import progress
from .cli_golden import setup_golden
from .errors import RefcompError

BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line (`refcomp: error: ...`, exit 2) rather than usage + error,
    and a flag is never matched by a prefix (`--dim` is not `--dims`: a typo, or a flag added later,
    must not silently become another). Subparsers are made of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        from .cli_select import UsageError
        raise UsageError(f"{message} (see `{self.prog} --help`)")


class _Formatter(argparse.HelpFormatter):
    """Fills `{unbound_dim}` in a help text when the help is printed, not when the parser is built:
    the value lives in cli_run, which `refcomp --version` must not import."""

    def _get_help_string(self, action) -> str:
        text = super()._get_help_string(action) or ""
        if "{unbound_dim}" in text:
            from .cli_run import UNBOUND_DIM
            text = text.replace("{unbound_dim}", str(UNBOUND_DIM))
        return text

def _compile_target(args):
    from .cli_run import load_target, parse_dims
    from .compiler import compile as compile_program
    dims_hint = parse_dims(args.dims_hint, "--dims-hint")
    return compile_program(load_target(args.target).outputs, search=not args.no_search, dims_hint=dims_hint)


def _spmd_target(args):
    """rc.spmd.compile of TARGET on --mesh dp=2,tp=4 with --shard NAME=dp,-,- (- or none: whole)."""
    from .cli_run import load_target, parse_dims
    from .cli_select import UsageError
    from .spmd import Mesh, compile as compile_spmd
    mesh = Mesh(parse_dims(args.mesh, "--mesh"))
    shardings = {}
    for token in args.shard or ():
        name, eq, spec = token.partition("=")
        if not (eq and name):
            raise UsageError(f"--shard takes NAME=AXIS,AXIS,... (- for a whole dim), got {token!r}")
        shardings[name] = tuple(None if a in ("-", "none", "") else a for a in spec.split(","))
    return compile_spmd(load_target(args.target).outputs, mesh, shardings, search=not args.no_search,
                        dims_hint=parse_dims(args.dims_hint, "--dims-hint"))


def _compile(args) -> int:
    prog = _compile_target(args)
    print(prog)
    if args.source:
        print(prog.source)
    if args.report:
        print(prog.report())
    if prog.search is not None:
        print(prog.cost_summary())
    return 0


def _explain(args) -> int:
    """The explanation as text, or with --html the explorer page (Program.explorer, where it exists);
    with --mesh, the SPMD program's: every tensor's sharding and the collectives."""
    program = _spmd_target(args) if args.mesh else _compile_target(args)
    if args.html is None:
        print(program.explain())
        return 0
    explorer = getattr(program, "explorer", None)
    if explorer is None:
        from .cli_select import UsageError
        raise UsageError("--html needs Program.explorer, which this version of refcomp does not have yet")
    explorer(args.html)
    print(f"wrote {args.html}")
    return 0


def _run(args) -> int:
    from .cli_run import run_command
    return run_command(args.target, args.backend, args.feeds, args.dims, not args.no_search, args.profile)


def _profile(args) -> int:
    """Profile TARGET once at the binding `run` would use (a golden case's stored binding --binding,
    else every dim left out of --dims at cli_run.UNBOUND_DIM), on the same feeds; the program is
    compiled for that binding (unless --dims-hint), so the cost model's figures are at it too."""
    from .cli_run import feeds_for, load_target, parse_dims, target_dims
    from .compiler import compile as compile_program
    target = load_target(args.target)
    feeds, dims, origin = feeds_for(target, None, target_dims(target, args.dims), args.binding)
    hint = parse_dims(args.dims_hint, "--dims-hint") or dims or None
    prog = compile_program(target.outputs, search=not args.no_search, dims_hint=hint)
    print(f"{prog}; {origin}")
    print(prog.profile(feeds, dims=prog.bind(feeds, dims)[1]).table())
    return 0


def _doctor(args) -> int:
    from .exec.doctor import doctor
    print(doctor())
    return 0


def _setup_program(func):
    def setup(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", help="a golden case name, or FILE.py:FUNCTION returning the outputs")
        parser.add_argument(
            "--no-search", action="store_true", help="the plain lowering: one kernel per compute node"
        )
        parser.add_argument(
            "--dims-hint", nargs="*", metavar="NAME=INT", help="the binding the cost model assumes"
        )
        if func is _profile:
            parser.add_argument(
                "--dims",
                nargs="+",
                metavar="NAME=INT",
                help="profile at this binding (B=2,T=7; dims left out: {unbound_dim}, as `run`)",
            )
            parser.add_argument(
                "--binding", type=int, default=0, help="a golden case's stored binding to profile (default 0)"
            )
        if func is _compile:
            parser.add_argument("--source", action="store_true", help="print the whole CUDA translation unit")
            parser.add_argument(
                "--report", action="store_true", help="nvcc's registers, shared memory and spills per kernel"
            )
        if func is _explain:
            parser.add_argument(
                "--html", metavar="PATH", help="write the interactive explorer page there instead"
            )
            parser.add_argument(
                "--mesh",
                nargs="*",
                metavar="AXIS=SIZE",
                help="compile for a device mesh (rc.spmd), e.g. dp=2,tp=4",
            )
            parser.add_argument(
                "--shard",
                nargs="*",
                metavar="INPUT=AXES",
                help="an input's sharding, e.g. x=dp,-,- (with --mesh)",
            )
        parser.set_defaults(func=func)
    return setup


def _setup_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="a golden case name, or FILE.py:FUNCTION returning the outputs")
    parser.add_argument(
        "--feeds",
        metavar="FILE.npz",
        help="input arrays by name (or golden's in.<name>/dims.<sym> layout); default: random",
    )
    parser.add_argument(
        "--backend", help="emulator, pycuda or numpy (default: pycuda where usable, else emulator)"
    )
    parser.add_argument("--dims", nargs="+", metavar="NAME=INT", help="the binding: B=2,T=7 or B=2 T=7")
    parser.add_argument(
        "--no-search", action="store_true", help="the plain lowering: one kernel per compute node"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also print the profiler's counters per kernel"
    )
    parser.set_defaults(func=_run)


def _setup_generate(parser: argparse.ArgumentParser) -> None:
    """refcomp generate's options (cli_generate.py runs it): the model, the pool, the sampling."""
    for flag, kind, default in (
        ("prompt", str, "1,2,3,4"),
        ("batch", int, 1),
        ("max-new-tokens", int, 32),
        ("backend", str, None),
        ("layers", int, 2),
        ("d-model", int, 64),
        ("heads", int, 4),
        ("vocab", int, 256),
        ("init", float, 0.2),
        ("weights", str, None),
        ("config", str, None),
        ("pages", int, 64),
        ("page-size", int, 16),
        ("temperature", float, 0.0),
        ("top-k", int, 0),
        ("top-p", float, 1.0),
        ("repetition-penalty", float, 1.0),
        ("seed", int, 0),
    ):
        parser.add_argument(f"--{flag}", type=kind, default=default, help=f"(default {default})")
    parser.set_defaults(func=_generate)


def _generate(args) -> int:
    from .cli_generate import generate_command
    return generate_command(args)


def _setup_serve(parser: argparse.ArgumentParser) -> None:
    """refcomp serve's options (cli_serve.py runs it): the model as generate takes it, the pool, the
    scheduler and the address."""
    parser.add_argument("model", help="random-gpt2 (a random-weight GPT-2 of the options below), or a "
                        "directory holding config.json and model.safetensors")
    for flag, kind, default in (
        ("host", str, "127.0.0.1"), ("port", int, 8000), ("served-name", str, None), ("backend", str, None),
        ("layers", int, 2), ("d-model", int, 64), ("heads", int, 4), ("vocab", int, 256),
        ("init", float, 0.2), ("seed", int, 0), ("pages", int, 256), ("page-size", int, 16),
        ("prefill-chunk", int, 64), ("step-tokens", int, 256),
    ):
        parser.add_argument(f"--{flag}", type=kind, default=default, help=f"(default {default})")
    parser.add_argument("--no-prefix-cache", action="store_true", help="do not share prompt prefixes' pages")
    parser.set_defaults(func=_serve)


def _serve(args) -> int:
    from .cli_serve import serve_command
    return serve_command(args)


# --- the command table ----------------------------------------------------------------------------
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "golden": ("golden cases: check the reference against stored outputs, or regenerate them", setup_golden),
    "compile": (
        "compile a program and show its kernels, CUDA source and nvcc report",
        _setup_program(_compile),
    ),
    "explain": (
        "show the graph before and after search, the rules applied and each kernel's cost",
        _setup_program(_explain),
    ),
    "profile": (
        "run once in the instrumented host build: per kernel, global requests and sectors, shared-memory "
        "bank conflicts, barriers and flops beside the cost model",
        _setup_program(_profile),
    ),
    "run": (
        "compile, run once on a backend, check against the float64 reference and time each kernel",
        _setup_run,
    ),
    "doctor": (
        "which backends are usable here, and how to get the others",
        lambda p: p.set_defaults(func=_doctor),
    ),
    "generate": (
        "generate tokens with a small GPT-2 over the paged KV cache and print tokens per second",
        _setup_generate,
    ),
    "serve": (
        "serve a model over HTTP with an OpenAI-compatible /v1/completions (needs the [serve] extra)",
        _setup_serve,
    ),
}


def version() -> str:
    """The installed distribution's version, else the package's own (a checkout on sys.path)."""
    from importlib.metadata import PackageNotFoundError, version as installed
    try:
        return installed("refcomp")
    except PackageNotFoundError:
        from .version import __version__
        return __version__


class _Version(argparse.Action):
    """--version, looked up only when asked: importlib.metadata would slow every other command."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"refcomp {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="refcomp", description="refcomp: a reference compiler for tensor programs")
    parser.add_argument("--version", action=_Version, help="show refcomp's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, setup) in COMMANDS.items():
        setup(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; returns the exit status (see the module docstring), never a traceback for
    a user's mistake."""
    try:
        with progress.switched(progress.env_setting() is not False):
            args = build_parser().parse_args(argv)
            status = int(args.func(args))
        sys.stdout.flush()  # inside the try: a reader gone away shows here, not at interpreter exit
        return status
    except SystemExit as done:  # --help, --version
        return done.code if isinstance(done.code, int) else 0
    except (RefcompError, KeyboardInterrupt) as exc:
        if os.environ.get("REFCOMP_DEBUG", "") not in ("", "0"):
            raise
        if isinstance(exc, KeyboardInterrupt):
            return 130
        print(f"refcomp: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE_STATUS
    except (
        OSError
    ) as exc:  # a path refcomp was told to write to or read from (--html, --dir): the user's to fix
        print(f"refcomp: error: {exc}", file=sys.stderr)
        return 2


def _one_line(exc: Exception) -> str:
    """The first line of the message; a long one (g++'s output) says how to see the rest."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    more = f" [{len(lines) - 1} more lines: set REFCOMP_DEBUG=1 to see them]" if len(lines) > 1 else ""
    return lines[0] + more


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not raise again (the
    recipe in Python's `signal` docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (captured in a test)
        pass


if __name__ == "__main__":
    sys.exit(main())
