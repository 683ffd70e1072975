"""The `refcomp` command line: `refcomp <command> [<subcommand>] ...`.

Commands are registered in `COMMANDS`, a table of name -> (help, setup). `setup(parser)` adds the
command's arguments (or its own subcommands) and sets `func` on the parser with
`parser.set_defaults(func=...)`; `func(args)` returns the exit status. To add a command, write a
setup function and add one line to the table.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional, Sequence


# --- refcomp golden ... ---------------------------------------------------------------------------
def _golden_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--golden-dir", metavar="DIR", help="the golden folder (default: $REFCOMP_GOLDEN_DIR, else <repo>/golden)")
    parser.add_argument("--case", "-k", dest="cases", action="append", metavar="NAME", help="only this case (repeatable)")


def _with_golden_dir(args, run: Callable[[], int]) -> int:
    """Run with $REFCOMP_GOLDEN_DIR set from --golden-dir (restored after); an unknown case exits 2."""
    import os

    from .golden import UnknownCaseError
    old = os.environ.get("REFCOMP_GOLDEN_DIR")
    if args.golden_dir:
        os.environ["REFCOMP_GOLDEN_DIR"] = args.golden_dir
    try:
        return run()
    except UnknownCaseError as e:
        print(f"refcomp golden: error: {e.args[0]}", file=sys.stderr)
        return 2
    finally:
        if args.golden_dir and old is None:
            os.environ.pop("REFCOMP_GOLDEN_DIR", None)
        elif args.golden_dir:
            os.environ["REFCOMP_GOLDEN_DIR"] = old


def _golden_check(args) -> int:
    from . import golden

    def run() -> int:
        cases = golden.select(golden.load_cases(), args.cases)
        failures = golden.check(precision=args.precision, names=args.cases, oracle=args.oracle, cases=cases)
        precisions = "float64 and float32" if args.precision == "both" else args.precision
        runs = sum(len(c.bindings) for c in cases)
        where = golden.data_dir()
        if not failures:
            print(f"golden check: {len(cases)} cases, {runs} bindings, {precisions}"
                  f"{' and the oracles' if args.oracle else ''}: all agree ({where})")
            return 0
        for failure in failures:
            print(f"FAIL {failure}")
        bad = sorted({f.case for f in failures})
        print(f"golden check: {len(failures)} failures in {len(bad)} of {len(cases)} cases: {', '.join(bad)} ({where})")
        return 1

    return _with_golden_dir(args, run)


def _golden_update(args) -> int:
    from . import golden

    def run() -> int:
        result = golden.update_result(names=args.cases, dry_run=args.dry_run, force=args.force)
        print(result.summary() + (" (dry run: nothing written)" if args.dry_run else ""))
        return 0 if result.ok else 1

    return _with_golden_dir(args, run)


def _golden_list(args) -> int:
    from . import golden

    def run() -> int:
        for case in golden.select(golden.load_cases(), args.cases):
            bindings = " ".join(str(b) for b in case.bindings) if case.symbolic else "-"
            print(f"{case.name:36s} {','.join(case.tags):24s} {bindings}")
        return 0

    return _with_golden_dir(args, run)


def _setup_golden(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="golden_command", metavar="SUBCOMMAND", required=True)
    check = sub.add_parser("check", help="re-evaluate every golden case and compare with the stored outputs")
    _golden_options(check)
    check.add_argument("--precision", choices=("float64", "float32", "both"), default="both",
                       help="evaluate in this precision (default: both)")
    check.add_argument("--oracle", action="store_true", help="also compare the stored outputs with each case's NumPy oracle")
    check.set_defaults(func=_golden_check)
    update = sub.add_parser("update", help="regenerate the golden data and print what changed")
    _golden_options(update)
    update.add_argument("--dry-run", action="store_true", help="report the changes without writing anything")
    update.add_argument("--force", action="store_true", help="write outputs even where they disagree with the oracle")
    update.set_defaults(func=_golden_update)
    listing = sub.add_parser("list", help="list the golden cases with their tags and bindings")
    _golden_options(listing)
    listing.set_defaults(func=_golden_list)


# --- compile / explain / doctor --------------------------------------------------------------------
def _load_target(target: str):
    """Outputs named by TARGET: a golden case name, or FILE.py:FUNCTION returning tensors."""
    if ":" in target:
        import importlib.util
        path, func = target.rsplit(":", 1)
        spec = importlib.util.spec_from_file_location("refcomp_target", path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"refcomp: cannot load {path!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        built = getattr(module, func)()
        return built[0] if isinstance(built, tuple) else built
    from . import golden
    cases = {c.name: c for c in golden.load_cases()}
    if target not in cases:
        raise SystemExit(f"refcomp: {target!r} is neither FILE.py:FUNCTION nor a golden case (see `refcomp golden list`)")
    return cases[target].build()


def _dims(pairs: Sequence[str]) -> dict[str, int]:
    out = {}
    for pair in pairs or ():
        name, _, value = pair.partition("=")
        if not value.isdigit():
            raise SystemExit(f"refcomp: --dims-hint and --dims take NAME=INT, got {pair!r}")
        out[name] = int(value)
    return out


def _compile_target(args):
    from .compiler import compile as compile_program
    return compile_program(_load_target(args.target), search=not args.no_search, dims_hint=_dims(args.dims_hint))


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
    print(_compile_target(args).explain())
    return 0


def _profile(args) -> int:
    """Profile TARGET once: a golden case on its stored feeds (binding --binding), else random feeds
    at --dims (default: the binding the cost model priced)."""
    from . import golden
    from .exec.profile import example_feeds
    prog = _compile_target(args)
    cases = {c.name: c for c in golden.load_cases()} if ":" not in args.target else {}
    if args.target in cases and not args.dims:
        case = cases[args.target]
        if not 0 <= args.binding < len(case.bindings):
            raise SystemExit(f"refcomp: {args.target} has bindings 0 to {len(case.bindings) - 1}, not {args.binding}")
        feeds, dims = golden.case_feeds(case, args.binding)
    else:
        feeds, dims = example_feeds(prog, {**prog.cost_bindings, **_dims(args.dims)})
    print(prog)
    print(prog.profile(feeds, dims=dims).table())
    return 0


def _doctor(args) -> int:
    from .exec.doctor import doctor
    print(doctor())
    return 0


def _setup_program(func):
    def setup(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", help="a golden case name, or FILE.py:FUNCTION returning the outputs")
        parser.add_argument("--no-search", action="store_true", help="the plain lowering: one kernel per compute node")
        parser.add_argument("--dims-hint", nargs="*", metavar="NAME=INT", help="the binding the cost model assumes")
        if func is _profile:
            parser.add_argument("--dims", nargs="*", metavar="NAME=INT", help="profile at this binding, on random feeds")
            parser.add_argument("--binding", type=int, default=0, help="a golden case's stored binding to profile (default 0)")
        if func is _compile:
            parser.add_argument("--source", action="store_true", help="print the whole CUDA translation unit")
            parser.add_argument("--report", action="store_true", help="nvcc's registers, shared memory and spills per kernel")
        parser.set_defaults(func=func)
    return setup


# --- the command table ----------------------------------------------------------------------------
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "golden": ("golden cases: check the reference against stored outputs, or regenerate them", _setup_golden),
    "compile": ("compile a program and show its kernels, CUDA source and nvcc report", _setup_program(_compile)),
    "explain": ("show the graph before and after search, the rules applied and each kernel's cost", _setup_program(_explain)),
    "profile": ("run once in the instrumented host build: per kernel, global requests and sectors, shared-memory "
                "bank conflicts, barriers and flops beside the cost model", _setup_program(_profile)),
    "doctor": ("which backends are usable here, and how to get the others", lambda p: p.set_defaults(func=_doctor)),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="refcomp", description="refcomp: a reference compiler for tensor programs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (help_text, setup) in COMMANDS.items():
        setup(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
