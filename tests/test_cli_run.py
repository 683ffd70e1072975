"""The command line: --version, `refcomp run`, one-line errors (exit 2), a closed stdout, progress."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc
from refcomp import cli_run, cli_select, progress
from refcomp.cli import main
from refcomp.exec.program import Program

REPO = Path(__file__).resolve().parent.parent
MODEL = '''
import refcomp as rc

def tiny():
    x = rc.input("x", ("B", "T"))
    return {"y": (x * 2.0).relu(), "s": x.sum(axis=-1)}

def fixed():
    return rc.input("x", (3, 5)).exp()
'''


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    (tmp_path / "broken.py").write_text("import refcomp\nraise ValueError('bad model')\n")
    return path


def _refcomp(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "refcomp", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        **kwargs,
    )


def test_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("refcomp ") and out.split()[1][0].isdigit()
    assert _refcomp("--version").stdout == out


@pytest.mark.parametrize("backend", ["emulator", "numpy"])
def test_run_a_golden_case_passes(backend, capsys):
    assert main(["run", "nn_layer_norm", "--backend", backend, "--no-search"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"refcomp run nn_layer_norm on {backend}:")
    assert "max abs err" in out and out.rstrip().endswith("PASS")
    if backend == "emulator":
        assert "host wall time around each launch" in out and "\nk0_" in out


@pytest.mark.parametrize("dims", [["B=2,T=3"], ["B=2", "T=3"]])
def test_run_a_file_target_with_dims(model, dims, capsys):
    assert main(["run", f"{model}:tiny", "--backend", "numpy", "--dims", *dims]) == 0
    out = capsys.readouterr().out
    assert "B=2, T=3" in out and "\ny " in out and "\ns " in out


def test_run_with_feeds_npz(model, tmp_path, capsys):
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    assert main(["run", f"{model}:tiny", "--feeds", str(feeds), "--backend", "emulator", "--no-search"]) == 0
    out = capsys.readouterr().out
    assert f"feeds from {feeds}" in out and "B=3, T=4" in out  # the dims the arrays fix


def test_run_reports_a_mismatch_with_exit_1(model, monkeypatch, capsys):
    real = cli_run.run_timed

    def off_by_one(*args):
        values, times, clock = real(*args)
        return values + 1.0, times, clock

    monkeypatch.setattr(cli_run, "run_timed", off_by_one)
    assert main(["run", f"{model}:fixed", "--backend", "numpy"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out.splitlines()[-1] and "max abs err 1" in out


def test_run_profile_prints_the_counters(capsys):
    assert main(["run", "prim_add", "--backend", "emulator", "--no-search", "--profile"]) == 0
    assert "sect/req" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["run", "nn_layer_norm", "--backend", "cuda"], "unknown backend 'cuda'"),
    (["run", "no_such_case"], "neither FILE.py:FUNCTION nor a golden case"),
    (["run", "missing.py:f"], "no such file: 'missing.py'"),
    (["run", "{dir}/model.py:nope"], "has no function 'nope' (it defines: fixed, tiny)"),
    (["run", "{dir}/broken.py:f"], "raised ValueError at broken.py:2: bad model"),
    (["run", "{dir}/model.py:tiny", "--dims", "B"], "--dims takes NAME=INT pairs"),
    (["run", "{dir}/model.py:tiny", "--dims", "Q=2"], "--dims names Q, not a dimension of this graph"),
    (["run", "{dir}/model.py:tiny", "--feeds", "{dir}/model.py"], "not a readable .npz"),
    (["run", "{dir}/model.py:tiny", "--feeds", "{dir}/none.npz"], "no such feeds file"),
    (["profile", "sym_softmax", "--binding", "9"], "has bindings 0 to"),
    (["golden", "check", "-k", "no_such_case"], "-k 'no_such_case' matches no golden case"),
    (["golden", "check", "--case", "no_such_case"], "no golden case named 'no_such_case'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["run", "{dir}/model.py:tiny", "--dim", "B=2"], "unrecognized arguments: --dim B=2"),  # not --dims
    (["run", "nn_layer_norm", "--back", "numpy"], "unrecognized arguments: --back"),
    (["golden", "check", "--prec", "float64"], "unrecognized arguments: --prec"),
    (["profile", "prim_add", "--bind", "0"], "unrecognized arguments: --bind"),
])
def test_mistakes_are_one_line_and_exit_2(model, argv, says, capsys):
    assert main([a.format(dir=model.parent) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("refcomp: error: "), captured.err
    assert says in captured.err and "Traceback" not in captured.err


def test_a_mistake_in_a_subprocess(model):
    done = _refcomp("run", f"{model}:nope")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("refcomp: error: ") and done.stderr.count("\n") == 1


def test_explain_html_calls_the_explorer_when_there_is_one(tmp_path, monkeypatch, capsys):
    written = []
    monkeypatch.setattr(
        Program,
        "explorer",
        lambda self, path=None, feeds=None, dims=None: written.append(path),
        raising=False,
    )
    assert main(["explain", "prim_add", "--no-search", "--html", str(tmp_path / "x.html")]) == 0
    assert written == [str(tmp_path / "x.html")] and "wrote" in capsys.readouterr().out
    monkeypatch.delattr(Program, "explorer", raising=False)
    assert main(["explain", "prim_add", "--no-search", "--html", str(tmp_path / "x.html")]) == 2
    assert "Program.explorer" in capsys.readouterr().err


def test_a_closed_stdout_exits_quietly():
    """The reader is gone before refcomp writes a byte: status 141, nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "refcomp", "golden", "list"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


def test_head_cuts_the_output_without_a_traceback():
    done = subprocess.run(f"set -o pipefail; '{sys.executable}' -m refcomp golden list | head -1", shell=True,
                          executable="/bin/bash", capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.count("\n") == 1 and "Traceback" not in done.stderr and done.stderr == ""
    assert done.returncode in (0, 141)  # 0 when refcomp wrote everything before head left


# --- progress ------------------------------------------------------------------------------------
def test_progress_into_a_pipe_is_one_line_per_stage(tmp_path, monkeypatch, capsys):
    """Every stage shown (DELAY_S = 0), each as one plain line; a fresh graph, so each runs."""
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setenv("REFCOMP_PROGRAM_CACHE_DIR", str(tmp_path / "programs"))
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "kernels"))
    unique = tmp_path / "unique.py"
    unique.write_text(
        f"import refcomp as rc\ndef f():\n"
        f"    return rc.input('x', (3, 7)).exp() * {time.time_ns() % 997 + 0.5}\n"
    )
    assert main(["run", f"{unique}:f", "--backend", "emulator"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert all(line.startswith("refcomp: ") and " ... done in " in line for line in lines), lines
    stages = [line.split(" ... ")[0] for line in lines]
    assert sorted(stages) == ["refcomp: code generation", "refcomp: g++ build", "refcomp: search"]


def test_quick_stages_and_library_users_see_nothing(monkeypatch, capsys):
    assert main(["run", "prim_add", "--backend", "numpy"]) == 0  # under a second: no progress
    assert capsys.readouterr().err == ""
    monkeypatch.delenv(progress.ENV, raising=False)
    assert not progress.enabled()  # main switched it on for its own run only
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    with progress.stage("search") as shown:
        shown.note("1 state")
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_redraws_then_leaves_one_line(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    monkeypatch.setattr(progress, "REFRESH_S", 0.01)
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress.switched(True), progress.stage("g++ build") as shown:
        shown.note("3 states")
        time.sleep(0.3)
    text = terminal.getvalue()
    assert "\rrefcomp: g++ build ... " in text  # redrawn in place while it runs
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.rsplit("\r", 1)[-1].startswith("refcomp: g++ build ... done in 0.")


# --- case names: suggestions, -k -----------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "nn_layer_nrom"], "nor a golden case; did you mean 'nn_layer_norm', "),
        (["explain", "prim_ad"], "did you mean 'prim_add'"),
        (["compile", "prim_ad"], "did you mean 'prim_add'"),
        (["profile", "sym_sofmax"], "did you mean 'sym_softmax'"),
        (
            ["golden", "check", "--case", "nn_layer_nrom"],
            "no golden case named 'nn_layer_nrom'; did you mean 'nn_layer_norm'",
        ),
        (["golden", "update", "--case", "prim_ad", "--dry-run"], "did you mean 'prim_add'"),
        (
            ["golden", "list", "-k", "layernorm"],
            "-k 'layernorm' matches no golden case; did you mean 'nn_layer_norm'",
        ),
        (["golden", "list", "-k", "zzzzqqq"], "-k 'zzzzqqq' matches no golden case"),
    ],
)
def test_an_unknown_case_name_suggests_the_closest(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


@pytest.mark.parametrize(
    "expression, want",
    [
        (
            "layer_norm",
            ["half_layer_norm", "nn_layer_norm", "sym_layer_norm_linear"],
        ),  # a substring, as pytest's -k
        ("LAYER_NORM and not half", ["nn_layer_norm", "sym_layer_norm_linear"]),  # case-insensitive
        ("layer_norm and (half or linear)", ["half_layer_norm", "sym_layer_norm_linear"]),
        ("not not prim_add and not broadcast", ["prim_add"]),
        (
            "lf_lay or linear and sym_layer",
            ["half_layer_norm", "sym_layer_norm_linear"],
        ),  # and binds tighter than or
    ],
)
def test_k_selects_as_pytest_does(expression, want):
    names = [
        "half_layer_norm",
        "nn_layer_norm",
        "prim_add",
        "prim_add_broadcast",
        "sym_layer_norm_linear",
        "sym_softmax",
    ]
    assert cli_select.choose_names(names, None, [expression]) == want
    assert cli_select.choose_names(names, ["sym_softmax"], [expression, "prim"]) == [
        n for n in names if n in want or n == "sym_softmax" or "prim" in n
    ]  # --case and every -k: any of them


@pytest.mark.parametrize(
    "expression", ["", "a and", "(a", "a)", "and a", "a b", "not", "__import__('os').system('x')"]
)
def test_a_malformed_k_is_a_usage_error_never_code(expression):
    with pytest.raises(cli_select.UsageError, match="-k "):
        cli_select.choose_names(["a", "b"], None, [expression])


def _random_k(rng, words) -> str:
    """Half the time a token soup (mostly malformed), else a well-formed expression: operands joined by
    and/or, each behind a few `not`s and opening parentheses, closed at random."""
    if rng.random() < 0.5:
        soup = list(words) + ["not", "and", "or", "(", ")"]
        return " ".join(rng.choice(soup, size=int(rng.integers(1, 10))))
    out, depth = [], 0
    for k in range(int(rng.integers(1, 7))):
        out += [str(rng.choice(["and", "or"]))] if k else []
        opens = int(rng.integers(0, 3))
        out += ["not"] * int(rng.integers(0, 3)) + ["("] * opens + [str(rng.choice(words))]
        depth += opens
        closes = int(rng.integers(0, depth + 1))
        out += [")"] * closes
        depth -= closes
    return " ".join(out + [")"] * depth)


def test_k_agrees_with_pytests_own_parser_on_random_expressions():
    """The oracle is pytest's -k (its Expression, with the keyword matcher's case-insensitive
    substring test): random expressions, well-formed or not, must parse alike and match alike."""
    from _pytest.mark import expression
    Expression = expression.Expression
    parse_errors = (SyntaxError, getattr(expression, "ParseError", SyntaxError))  # newer pytest: SyntaxError

    rng = np.random.default_rng(3)
    names = ["alpha_beta", "beta", "Gamma_alpha", "delta"]
    words = ["alpha", "beta", "gamma", "delta", "zeta"]
    valid = malformed = 0
    for _ in range(3000):
        expression = _random_k(rng, words)
        try:
            theirs = Expression.compile(expression)
        except parse_errors:
            with pytest.raises(cli_select.UsageError, match="-k "):
                cli_select.parse_keywords(expression)
            malformed += 1
            continue
        steps = cli_select.parse_keywords(expression)
        for name in names:
            want = theirs.evaluate(lambda word, name=name: word.lower() in name.lower())
            assert cli_select.keyword_match(steps, name) == want, (expression, name)
        valid += 1
    assert valid > 1000 and malformed > 1000, (valid, malformed)


@pytest.mark.parametrize(
    "expression, want",
    [
        ("(" * 5000 + "prim" + ")" * 5000, ["prim_add", "prim_exp"]),
        ("not " * 5001 + "prim", ["sym_softmax"]),
        (" and ".join(["prim"] * 5000 + ["exp"]), ["prim_exp"]),
        (" or ".join(["nothing"] * 5000 + ["soft"]), ["sym_softmax"]),
    ],
)
def test_k_expressions_thousands_deep_are_matched_without_recursion(expression, want):
    assert cli_select.choose_names(["prim_add", "prim_exp", "sym_softmax"], None, [expression]) == want


def test_golden_list_and_check_take_k(capsys):
    assert main(["golden", "list", "-k", "layer_norm and not half"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [
        "nn_layer_norm",
        "sym_layer_norm_linear",
    ]
    assert main(["golden", "check", "--precision", "float64", "-k", "prim_add and not broadcast"]) == 0
    assert "golden check: 1 cases" in capsys.readouterr().out


# --- profile ---------------------------------------------------------------------------------------
def _binding_shown(out: str, marker: str) -> str:
    line = next(line for line in out.splitlines() if marker in line)
    return re.search(r"(?:[A-Z]+=\d+(?:, )?)+", line.split(marker, 1)[1]).group(0)


@pytest.mark.parametrize(
    "target, dims", [("{model}:tiny", []), ("{model}:tiny", ["--dims", "B=3"]), ("sym_softmax", [])]
)
def test_run_and_profile_take_the_same_default_dims(model, target, dims, capsys):
    target = target.format(model=model)
    assert main(["run", target, "--backend", "numpy", *dims]) == 0
    ran = _binding_shown(capsys.readouterr().out, " on numpy: ")
    assert main(["profile", target, *dims]) == 0
    assert _binding_shown(capsys.readouterr().out, "profile at ") == ran


def test_profile_prices_the_binding_it_ran(model, capsys):
    """Twice: the second compile comes from the program cache, whose figures were saved at its hint."""
    for _ in range(2):
        assert main(["profile", f"{model}:tiny", "--dims", "B=4", "T=5"]) == 0
        out = capsys.readouterr().out
        assert "profile at B=4, T=5:" in out
        assert "model figures as saved" not in out or "model figures as saved, at B=4, T=5" in out, out


# --- explain and kernel comments -------------------------------------------------------------------
def test_explain_prints_an_unchanged_graph_once(capsys):
    assert main(["explain", "prim_add"]) == 0  # one Add: the search has nothing to rewrite
    out = capsys.readouterr().out
    assert "graph (1 compute nodes; the search's rewrites left it unchanged):" in out
    assert "graph before" not in out and "graph after" not in out and out.count("Add#2 (3, 5)") == 1
    assert main(["explain", "nn_layer_norm"]) == 0  # rewritten: both graphs
    out = capsys.readouterr().out
    assert "graph before (" in out and "graph after (" in out and "left it unchanged" not in out


def test_kernel_comments_name_inputs_as_they_are_fed(model, capsys):
    assert main(["compile", f"{model}:tiny", "--source", "--no-search"]) == 0
    out = capsys.readouterr().out
    assert "//   in0 = x\n" in out and "= Input#" not in out
    x = rc.input("a */ b\nint evil;", (4,))  # the user's text, made safe as every comment line is
    source = rc.compile(x.exp(), search=False).source
    assert "//   in0 = a * / b\\x0aint evil;\n" in source and "\nint evil;" not in source
