"""The package's layers: data flows one way, and no stage imports a stage above it.

Every import in refcomp/ is read from the source (module-level and function-level, `import x` and
`from x import y`, relative or absolute) and mapped to its unit: a subpackage (`ops`, `search`, ...)
or a top-level module (`compiler`, `golden`, ...). docs/ARCHITECTURE.md draws the same table.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "refcomp"

# Lowest first: a unit may import only units listed before it (and itself).
# progress is below everything: search/ and exec/ report their stages through it, and it imports
# nothing of refcomp; version (the version string program files carry) neither. The reference sits right
# above ops: frontends fold constants with it and
# executors bind dims with it. exec runs what it is given and imports nothing of search; pipeline
# (lowering, pricing, assembly) is where the two meet. cli_select, cli_run and user_golden are the
# command line's own modules, under cli.
LAYERS = [
    "progress",
    "version",
    "errors",
    "symbolic",
    "ops",
    "reference",
    "codegen",
    "search",
    "exec",
    "pipeline",
    "frontends",
    "golden",
    "golden_update",
    "measure",
    "compiler",
    "onnx",
    "torch",
    "spmd",
    "serving",
    "__init__",
    "onnx_backend",
    "torch_backend",
    "fuzz",
    "cli_select",
    "cli_run",
    "cli_generate",
    "cli_serve",
    "user_golden", "cli_golden",
    "cli",
    "__main__",
]


def _unit(module: str) -> str:
    """refcomp.ops.tensor -> ops; refcomp.compiler -> compiler; refcomp -> __init__."""
    parts = module.split(".")
    assert parts[0] == "refcomp", module
    return parts[1] if len(parts) > 1 else "__init__"


@functools.lru_cache(maxsize=None)
def _trees() -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of the package, parsed once for all the checks below."""
    return tuple((path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py")))


@functools.lru_cache(maxsize=None)
def _imports() -> tuple[tuple[str, str, str, int], ...]:
    """(importing unit, imported unit, file, line) for every import of refcomp code."""
    found = []
    for path, tree in _trees():
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = module if rel.name == "__init__" else module.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                    # `from . import onnx` names a module, not an attribute of the package
                    targets = [f"{target}.{a.name}" for a in node.names] if node.module is None else [target]
                else:
                    targets = [node.module or ""]
            for target in targets:
                if target == "refcomp" or target.startswith("refcomp."):
                    found.append(
                        (_unit(module), _unit(target), str(path.relative_to(PACKAGE.parent)), node.lineno)
                    )
    return tuple(found + _lazy_imports())


def _lazy_imports() -> list[tuple[str, str, str, int]]:
    """The submodules refcomp/__init__.py imports by name on first use (its PEP 562 tables, which
    the source walk above cannot see as imports): imports of __init__ like any other."""
    import refcomp

    targets = {
        *refcomp._ATTRIBUTES.values(),
        *refcomp._SUBMODULES.values(),
        *(m for m, _ in refcomp._TABLES.values()),
    }
    return [("__init__", _unit("refcomp" + t), "refcomp/__init__.py", 0) for t in sorted(targets)]


def test_every_unit_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert units - set(LAYERS) <= {"templates"}, (
        f"give these a layer: {sorted(units - set(LAYERS) - {'templates'})}"
    )


def test_no_stage_imports_a_stage_above_it():
    rank = {unit: k for k, unit in enumerate(LAYERS)}
    rank["templates"] = rank["codegen"]  # the Jinja templates are codegen's data
    upward = [
        f"{path}:{line}: {a} imports {b}" for a, b, path, line in _imports() if a != b and rank[b] > rank[a]
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_cycle_between_units():
    edges: dict[str, set[str]] = {}
    for a, b, _, _ in _imports():
        if a != b:
            edges.setdefault(a, set()).add(b)
    state: dict[str, str] = {}
    for start in sorted(edges):  # iterative depth-first search; a grey node met again closes a cycle
        if start in state:
            continue
        stack = [(start, iter(sorted(edges.get(start, ()))))]
        state[start], path = "grey", [start]
        while stack:
            unit, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[unit] = "black"
                stack.pop()
                path.pop()
            elif state.get(child) == "grey":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(child):] + [child]))
            elif child not in state:
                state[child] = "grey"
                path.append(child)
                stack.append((child, iter(sorted(edges.get(child, ())))))


def test_the_checker_sees_function_level_imports():
    """A guard on the guard: the walk finds an import inside a function body."""
    inner = [(a, b) for a, b, path, line in _imports() if path.endswith("fuzz/check.py")]
    assert ("fuzz", "__init__") in inner  # `import refcomp as rc` inside _compile


def test_the_checker_sees_the_lazy_public_names():
    """A guard on the guard: rc.compile, imported on first use, is an import of the compiler by __init__."""
    assert ("__init__", "compiler", "refcomp/__init__.py", 0) in _imports()


def test_every_subpackage_has_an_init():
    missing = [
        str(p.relative_to(PACKAGE.parent))
        for p in PACKAGE.rglob("*")
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py")) and not (p / "__init__.py").exists()
    ]
    assert not missing, f"subpackages without __init__.py: {missing}"


def test_no_module_imports_another_modules_private_names():
    """`from .search import _moves` ties two modules to each other's internals: a name used outside its
    module is public (no leading underscore). Aliases (`import x as _x`) are the importer's own."""
    private = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            ours = isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("refcomp")
            )
            if ours:
                private += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert not private, "imports of private names:\n" + "\n".join(private)


def test_the_reference_sits_right_above_ops():
    """The oracle depends on the primitives alone, so frontends fold constants with it, and executors
    bind dims with it, without either reaching into the other."""
    assert LAYERS.index("reference") == LAYERS.index("ops") + 1
    below = set(LAYERS[:LAYERS.index("reference")])
    found = {b for a, b, _, _ in _imports() if a == "reference" and b != "reference"}
    assert found <= below, f"the reference imports {sorted(found - below)}"
    assert not [(a, path) for a, b, path, _ in _imports() if a == "frontends" and b == "exec"], (
        "frontends need no executor"
    )


def test_exec_imports_nothing_from_search():
    """One way through rc.compile: the search returns a schedule with its prices, codegen lowers it,
    and pipeline/ assembles the Program from what they returned; exec never prices or searches again."""
    found = [f"{path}:{line}" for a, b, path, line in _imports() if a == "exec" and b == "search"]
    assert not found, "exec imports search at:\n" + "\n".join(found)


def test_the_driver_calls_each_stage_once_in_order():
    """A guard on the walk: the driver's searched path is search, lowering, assembly, each named once."""
    source = (PACKAGE / "compiler.py").read_text()
    calls = ["run_search(", "lower_schedule(", "searched_program("]
    assert all(source.count(c) == 1 for c in calls), [source.count(c) for c in calls]
    assert [source.index(c) for c in calls] == sorted(source.index(c) for c in calls)


def test_codegen_spells_c_only_in_render_c():
    """The renderer seam: outside render_c.py (and cprint.py, the index printer), code generation reads
    no C column of the op and dtype tables and writes no C declaration or cast of its own."""
    import re
    spelled = re.compile(
        r"\.op\.c\b|\.c_identity\b|\.c_(load|store|round|storage)\b|__restrict__|"
        r"\"const (float|long long) |\(long long\)[\w(]|\(float\)\(|\? [^\"]* : 0(\.0f|LL)\)"
    )
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{k}: {line.strip()}"
        for path in sorted((PACKAGE / "codegen").glob("*.py"))
        if path.name not in ("render_c.py", "cprint.py", "highlight.py")
        for k, line in enumerate(path.read_text().splitlines(), 1)
        if spelled.search(line)
    ]
    assert not found, "C spelled outside codegen/render_c.py:\n" + "\n".join(found)
