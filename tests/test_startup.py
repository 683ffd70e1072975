"""Start-up (issue 32): `import refcomp` and `refcomp --version` import none of the heavy libraries,
and the lazily loaded public names are exactly the objects their modules define.

Nothing here is timed (a shared machine makes timings flaky): the test reads sys.modules of a fresh
interpreter instead. bench/startup_bench.py measures the seconds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc
from refcomp.ops import functions, names, random_tensors

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("sympy", "numpy", "jinja2", "onnx", "torch", "mpmath", "tqdm")


def _modules_after(code: str) -> set[str]:
    """The top-level packages and refcomp's modules loaded by `code` in a fresh interpreter."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    return {m for m in loaded if m.startswith("refcomp")} | {m.split(".")[0] for m in loaded}


@pytest.mark.parametrize(
    "code", ["import refcomp", "import refcomp as rc; rc.__version__; dir(rc); rc.__all__"]
)
def test_import_loads_no_heavy_library(code):
    loaded = _modules_after(code)
    assert not loaded & set(HEAVY), f"`{code}` imports {sorted(loaded & set(HEAVY))}"
    assert "refcomp.ops.core" not in loaded and "refcomp.compiler" not in loaded


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_no_compiler(argv):
    loaded = _modules_after(f"from refcomp.cli import main\nassert main({argv!r}) == 0")
    assert not loaded & set(HEAVY), f"refcomp {' '.join(argv)} imports {sorted(loaded & set(HEAVY))}"
    assert {m for m in loaded if m.startswith("refcomp.")} <= {
        "refcomp.cli",
        "refcomp.cli_golden",  # the golden subcommand's parser (argparse only)
        "refcomp.errors",
        "refcomp.progress",
        "refcomp.version",  # the version string alone
        "refcomp.ops",
        "refcomp.ops.names",
    }


def test_the_first_tensor_loads_the_ops_but_not_the_compiler():
    loaded = _modules_after("import refcomp as rc\nrc.input('x', (2, 3)).exp()")
    assert "refcomp.ops.tensor" in loaded and "sympy" in loaded
    assert not loaded & {"refcomp.compiler", "jinja2", "onnx", "torch"}


# Builders that take no tensor, each as the first call of a fresh interpreter (the lazy names load
# only the builder's own module), with NumPy's value: `rc.zeros(3)` once raised AttributeError there,
# the Tensor class not yet loaded.
FIRST_CALLS = {
    "rc.zeros((2, 3))": np.zeros((2, 3)),
    "rc.ones(3)": np.ones(3),
    "rc.full((2,), 1.5)": np.full((2,), 1.5),
    "rc.arange(5)": np.arange(5),
    "rc.eye(3)": np.eye(3),
    "rc.linspace(0, 1, 5)": np.linspace(0, 1, 5),
    "rc.constant(2.5)": np.float64(2.5),
    "rc.where(rc.arange(4) > 1, 1.0, -1.0)": np.where(np.arange(4) > 1, 1.0, -1.0),
    "rc.maximum(rc.arange(3), 1.0)": np.maximum(np.arange(3), 1.0),
    "rc.cat([rc.ones(2), rc.zeros(1)])": np.array([1.0, 1.0, 0.0]),
    "rc.atan2(rc.ones(1), rc.ones(1))": np.arctan2(np.ones(1), np.ones(1)),
    "rc.rand(4, generator=rc.Generator().manual_seed(0)).shape": (4,),
}


def test_each_builder_works_as_a_processs_first_call():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    probes = {
        code: subprocess.Popen(
            [sys.executable, "-c", "import refcomp as rc, json\n"
             f"v = {code}\n"
             "print(json.dumps(list(v) if isinstance(v, tuple) else rc.evaluate(v, {}).tolist()))"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for code in FIRST_CALLS
    }  # all at once: each is mostly the import of NumPy and SymPy
    for code, proc in probes.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{code} as the first call: {err.strip().splitlines()[-1:]}"
        got, want = json.loads(out.strip().splitlines()[-1]), FIRST_CALLS[code]
        if isinstance(want, tuple):
            assert tuple(got) == want, code
        else:
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, err_msg=code)


def test_every_public_name_resolves():
    for name in rc.__all__:
        assert getattr(rc, name) is not None, name
    assert len(rc.__all__) == len(set(rc.__all__))
    assert set(rc.__all__) <= set(dir(rc))


def test_star_import_brings_exactly_all():
    namespace: dict = {}
    exec("from refcomp import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(rc.__all__)
    assert "max" not in namespace and namespace["exp"] is functions.FUNCTIONS["exp"]  # Python's max is kept


def test_lazy_names_are_their_modules_objects():
    from refcomp import compiler, onnx, spmd
    from refcomp.ops import nn, return_types, tensor
    assert rc.Tensor is tensor.Tensor and rc.input is tensor.input and rc.compile is compiler.compile
    assert rc.nn is nn and rc.return_types is return_types and rc.onnx is onnx and rc.spmd is spmd
    assert rc.spmd.Mesh is rc.Mesh
    assert rc.exp is functions.FUNCTIONS["exp"] and rc.max is functions.FUNCTIONS["max"]
    assert rc.mm is functions.mm and rc.rand is random_tensors.rand
    assert (rc.float32, rc.bool, rc.int64) == ("float32", "bool", "int64")
    assert (
        isinstance(rc.compiler, types.ModuleType) and rc.compiler.H200 is not None
    )  # as code has reached it
    assert isinstance(rc.ops.graph, types.ModuleType)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        rc.no_such_name  # noqa: B018


def test_the_name_lists_match_the_tables():
    """refcomp/ops/names.py lists the tables' names for `import refcomp`: the tables are built from them."""
    assert tuple(functions.FUNCTIONS) == names.FUNCTIONS
    assert tuple(functions.DTYPES) == names.DTYPES
    assert tuple(random_tensors.FUNCTIONS) == names.RANDOM


def test_the_lazy_tables_do_not_overlap():
    """A name in two tables would depend on the order `__getattr__` reads them."""
    tables = [set(rc._TABLES), set(rc._SUBMODULES), set(rc._ATTRIBUTES)]
    for i, a in enumerate(tables):
        for b in tables[i + 1:]:
            assert not a & b, sorted(a & b)
