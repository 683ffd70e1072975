"""`refcomp golden`: check the reference against stored golden outputs, add a case for your own model,
regenerate or list the cases. Each command imports what it needs inside its function (start-up)."""
from __future__ import annotations

import argparse
import os
from typing import Callable


# --- refcomp golden ... ---------------------------------------------------------------------------
def _golden_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--golden-dir",
        metavar="DIR",
        help="the golden folder (default: $REFCOMP_GOLDEN_DIR, else <repo>/golden)",
    )
    parser.add_argument(
        "--case", dest="cases", action="append", metavar="NAME", help="only this case (repeatable)"
    )
    parser.add_argument("-k", dest="keywords", action="append", metavar="EXPR",
                        help="only cases whose names match, as pytest's -k: substrings with not, and, or, "
                             "parentheses (repeatable: any)")


def _chosen(args, names, what: str = "golden case"):
    """The case names --case and -k select (None: all), refused with a suggestion when they select none."""
    from .cli_select import choose_names
    return choose_names(list(names), args.cases, args.keywords, what)


def _with_golden_dir(args, run: Callable[[], int]) -> int:
    """Run with $REFCOMP_GOLDEN_DIR set from --golden-dir (restored after); an unknown case exits 2."""
    from .cli_select import UsageError
    from .golden import UnknownCaseError
    old = os.environ.get("REFCOMP_GOLDEN_DIR")
    if args.golden_dir:
        os.environ["REFCOMP_GOLDEN_DIR"] = args.golden_dir
    try:
        return run()
    except UnknownCaseError as e:
        raise UsageError(e.args[0]) from None
    finally:
        if args.golden_dir and old is None:
            os.environ.pop("REFCOMP_GOLDEN_DIR", None)
        elif args.golden_dir:
            os.environ["REFCOMP_GOLDEN_DIR"] = old


def _golden_check(args) -> int:
    from . import golden
    from .cli_select import UsageError
    if args.dir is not None:
        return _golden_check_dir(args)
    if args.backend is not None or args.no_search:
        raise UsageError("--backend and --no-search apply to a folder of your own cases: add --dir DIR")

    def run() -> int:
        every = golden.load_cases()
        names = _chosen(args, (c.name for c in every))
        cases = golden.select(every, names)
        failures = golden.check(precision=args.precision, names=names, oracle=args.oracle, cases=cases)
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
        print(
            f"golden check: {len(failures)} failures in {len(bad)} of {len(cases)} cases: "
            f"{', '.join(bad)} ({where})"
        )
        return 1

    return _with_golden_dir(args, run)


def _golden_check_dir(args) -> int:
    """`golden check --dir DIR`: the user's own cases (refcomp.user_golden)."""
    from . import user_golden
    from .cli_select import UsageError
    if args.oracle or args.golden_dir:
        raise UsageError("--oracle and --golden-dir apply to refcomp's own golden cases, not to --dir")
    precisions = ("float64", "float32") if args.precision == "both" else (args.precision,)
    names = _chosen(args, user_golden.stored_cases(args.dir), f"case stored in {args.dir}")
    results = user_golden.check(args.dir, args.backend, names, precisions, search=not args.no_search)
    for result in results:
        print(result.line())
    print(user_golden.summary(results, args.dir))
    return 1 if any(r.failures for r in results) else 0


def _golden_add(args) -> int:
    from . import user_golden
    from .cli_run import parse_dims
    print(user_golden.add(args.target, args.name, args.dir, parse_dims(args.dims), args.force))
    return 0


def _golden_update(args) -> int:
    from . import golden
    from .golden_update import update_result

    def run() -> int:
        result = update_result(
            names=_chosen(args, (c.name for c in golden.load_cases())), dry_run=args.dry_run, force=args.force
        )
        print(result.summary() + (" (dry run: nothing written)" if args.dry_run else ""))
        return 0 if result.ok else 1

    return _with_golden_dir(args, run)


def _golden_list(args) -> int:
    from . import golden

    def run() -> int:
        every = golden.load_cases()
        for case in golden.select(every, _chosen(args, (c.name for c in every))):
            bindings = " ".join(str(b) for b in case.bindings) if case.symbolic else "-"
            print(f"{case.name:36s} {','.join(case.tags):24s} {bindings}")
        return 0

    return _with_golden_dir(args, run)


def setup_golden(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="golden_command", metavar="SUBCOMMAND", required=True)
    check = sub.add_parser("check", help="re-evaluate every golden case and compare with the stored outputs")
    _golden_options(check)
    check.add_argument("--precision", choices=("float64", "float32", "both"), default="both",
                       help="evaluate in this precision (default: both)")
    check.add_argument(
        "--oracle", action="store_true", help="also compare the stored outputs with each case's NumPy oracle"
    )
    check.add_argument(
        "--dir", metavar="DIR", help="check your own cases stored there by `refcomp golden add` instead"
    )
    check.add_argument(
        "--backend",
        help="with --dir: run the compiled programs here "
        "(emulator, pycuda, numpy; default: the default backend)",
    )
    check.add_argument("--no-search", action="store_true", help="with --dir: compile without the search")
    check.set_defaults(func=_golden_check)
    add = sub.add_parser(
        "add",
        help="store a golden case for your own model: FILE.py:FUNCTION's outputs on seeded random inputs",
    )
    add.add_argument(
        "target",
        metavar="FILE.py:FUNCTION",
        help="returns a dict of named output tensors, or one tensor (named y)",
    )
    add.add_argument("--name", required=True, help="the case's name (its file is DIR/NAME.npz)")
    add.add_argument("--dir", default="golden_cases", help="where to store it (default: ./golden_cases)")
    add.add_argument(
        "--dims", nargs="+", metavar="NAME=INT", help="the binding of the graph's symbolic dims (B=2,T=7)"
    )
    add.add_argument("--force", action="store_true", help="replace a stored case of that name")
    add.set_defaults(func=_golden_add)
    update = sub.add_parser("update", help="regenerate the golden data and print what changed")
    _golden_options(update)
    update.add_argument("--dry-run", action="store_true", help="report the changes without writing anything")
    update.add_argument(
        "--force", action="store_true", help="write outputs even where they disagree with the oracle"
    )
    update.set_defaults(func=_golden_update)
    listing = sub.add_parser("list", help="list the golden cases with their tags and bindings")
    _golden_options(listing)
    listing.set_defaults(func=_golden_list)


# --- compile / explain / profile / run / doctor -----------------------------------------------------
