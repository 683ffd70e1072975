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


# --- the command table ----------------------------------------------------------------------------
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "golden": ("golden cases: check the reference against stored outputs, or regenerate them", _setup_golden),
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
