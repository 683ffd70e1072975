"""Program files and caches are untrusted input: what a hostile or damaged file can and cannot do.

A file's dims are parsed, never evaluated; its kernels and launches are generated again from its
graph and schedule and must equal the ones it lists; its MAC is keyed per user; the outputs a
caller passes must be the saved graph; every malformed file is a ProgramFileError, and a bad cache
entry is rebuilt (docs/reliability.md, "Threat model").
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc
from refcomp.exec import cache, emulator
from refcomp.pipeline import program_cache
from refcomp.exec.saved import ProgramFileError, body_mac
from refcomp.search import alternatives
from refcomp.symbolic.dim_text import DimTextError, parse_dim


def _double(d=8):
    x = rc.input("x", ("B", d))
    return x * 2.0


def _saved(tmp_path: Path, outputs=None) -> Path:
    path = tmp_path / "p.json"
    rc.compile(_double() if outputs is None else outputs, cache=False).save(path)
    return path


def _forge(path: Path, change, remac: bool = True) -> None:
    """Edit a file as an attacker would; with `remac`, as one who holds this user's key (the worst
    case: the checks after the MAC must still hold)."""
    data = json.loads(path.read_text())
    change(data)
    body = {k: v for k, v in data.items() if k not in ("format", "version", "mac")}
    if remac:
        data["mac"] = body_mac(body)
    path.write_text(json.dumps(data))


def _a_view(data) -> dict:
    """The first view on an edge of a saved graph (the constant's broadcast in `_double`)."""
    return next(e[1][0] for n in data["nodes"] for e in n["srcs"] if e[1])


def _feeds(b=3, d=8):
    return {"x": np.arange(b * d, dtype=np.float32).reshape(b, d)}


# --- code execution ------------------------------------------------------------------------------
def test_a_kernel_source_edited_to_run_a_command_is_never_built(tmp_path):
    path = _saved(tmp_path)
    marker = tmp_path / "pwned"
    _forge(
        path,
        lambda d: d["kernels"][0]["source"].insert(
            0, f'#include <cstdlib>\nstatic int x = system("touch {marker}");'
        ),
    )
    emulator.clear_memory_cache()
    before = emulator.gxx_invocations()
    with pytest.raises(ProgramFileError, match="not the ones refcomp generates"):
        rc.load_program(path)
    with pytest.raises(ProgramFileError, match="not the ones refcomp generates"):
        rc.load_program(path, trusted=True)
    assert emulator.gxx_invocations() == before and not marker.exists()


def test_a_plain_sha256_no_longer_signs_a_file(tmp_path):
    """The old "signature" was a SHA-256 of the body anyone could recompute."""
    import hashlib
    path = _saved(tmp_path)

    def rehash(d):
        d["kernels"][0]["source"].append("// edited")
        body = {k: v for k, v in d.items() if k not in ("format", "version", "mac")}
        d["mac"] = hashlib.sha256(
            json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()

    _forge(path, rehash, remac=False)
    with pytest.raises(ProgramFileError, match="does not carry this user's MAC"):
        rc.load_program(path)


@pytest.mark.parametrize(
    "text", ["__import__('os').system('touch PWNED')", "B.__class__", "lambda: 1", "B; 1"]
)
def test_a_dim_written_as_code_is_refused_not_evaluated(tmp_path, text, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _saved(tmp_path)
    _forge(path, lambda d: d["nodes"][0]["shape"].__setitem__(0, text))
    with pytest.raises(ProgramFileError, match="cannot read the dim|does not follow"):
        rc.load_program(path)
    assert not (tmp_path / "PWNED").exists()


def test_a_launch_edited_to_write_out_of_bounds_is_refused(tmp_path):
    path = _saved(tmp_path)
    _forge(path, lambda d: d["kernels"][0]["launch"].update(work="1000000*B"))
    with pytest.raises(ProgramFileError, match="not the ones refcomp generates"):
        rc.load_program(path)


def test_an_impossible_schedule_is_a_program_file_error(tmp_path):
    x = rc.input("x", ("B", 8))
    path = _saved(tmp_path, (x.exp() + 1.0).sum(-1))
    _forge(path, lambda d: d["schedule"].update(matmul=list(range(len(d["nodes"])))))
    with pytest.raises(ProgramFileError):
        rc.load_program(path)


def test_the_dim_grammar_reads_what_refcomp_writes_and_nothing_else():
    from refcomp.symbolic.dims import idiv, imod, symbol
    import sympy
    b, t = symbol("B"), symbol("T")
    for d in (3 * b + 7, 5 - t, b * t ** 2, idiv(t + 1, 2), b * imod(3 * t + 1, 4), sympy.Max(0, t - 3),
              sympy.Min(9, b, 2 * t), -2 * b * t + idiv(b, 3), -t ** 2):
        assert sympy.expand(parse_dim(str(d)) - d) == 0, d
    assert parse_dim("(T + 1)//2") == idiv(t + 1, 2) and parse_dim("12") == 12
    for bad in [
        "1/2",
        "B**B",
        "T**-1",
        "idiv(B)",
        "(" * 100 + "B" + ")" * 100,
        "9" * 40,
        "B +",
        "Max",
        "B, T",
        "f(B)",
    ]:
        with pytest.raises(DimTextError):
            parse_dim(bad)


def test_a_dim_reads_back_as_it_was_spelled():
    """A product of a number and sums, 5*(B + 2)*(T + 2), is one SymPy product of three factors;
    multiplied left to right it would distribute the 5 first, (5*B + 10)*(T + 2): equal, but spelled
    apart, so a saved graph read back would no longer be the graph it was saved for."""
    from refcomp.symbolic.dims import idiv, symbol
    b, t = symbol("B"), symbol("T")
    for d in (5 * ((b + 2) * (t + 2)), -((b + 1) * (t + 2)), -5 * ((b + 2) * (t + 2)), 3 * ((b + 1) * t ** 2),
              idiv(3 * ((b + 1) * t), 2), b - 3 * ((t + 1) * (b + 2)), -(b + 1), -t ** 2):
        assert str(parse_dim(str(d))) == str(d), d


def test_a_padded_views_strides_load_against_the_graph_they_were_saved_for(tmp_path):
    """The fuzzer's finding (seed 18, graph 70): the output view of a (3, 3, B, T) input padded to
    (5, 5, B + 2, T + 2) has the stride 5*(B + 2)*(T + 2), which read back spelled differently, so
    load_program refused the very outputs the program was saved for."""
    def build():
        x = rc.input("x", (3, 3, "B", "T"))
        return {"y": x.pad([(1, 1), (0, 2), (1, 1), (0, 2)], value=-1.0)}

    prog = rc.compile(build(), cache=False)
    prog.save(tmp_path / "p.json")
    loaded = rc.load_program(tmp_path / "p.json", build())
    assert loaded.source == prog.source
    x = np.arange(3 * 3 * 2 * 4, dtype=np.float32).reshape(3, 3, 2, 4)
    want = np.pad(x, [(1, 1), (0, 2), (1, 1), (0, 2)], constant_values=-1.0)
    np.testing.assert_array_equal(loaded.run({"x": x}, backend="emulator")["y"], want)


# --- the graph a caller passes -------------------------------------------------------------------
def test_load_program_refuses_outputs_that_are_not_the_saved_graph(tmp_path):
    path = _saved(tmp_path)
    x = rc.input("x", ("B", 8))
    with pytest.raises(ProgramFileError, match="another graph"):
        rc.load_program(path, x * 3.0)
    wider = rc.input("x", ("B", 16))
    with pytest.raises(ProgramFileError, match="another graph"):
        rc.load_program(path, wider * 2.0)
    same = rc.load_program(path, x * 2.0)  # built again, at another line: the same graph
    np.testing.assert_array_equal(same.run(_feeds(), backend="emulator"), _feeds()["x"] * 2.0)


# --- damaged files -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "[" * 100000,
        '{"format": "refcomp-program", "version": ' + "9" * 5000 + "}",
        "{" * 500 + "}" * 500,
        '{"format": 1}',
        "null",
        "",
    ],
)
def test_a_damaged_file_is_a_program_file_error(tmp_path, text):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ProgramFileError):
        rc.load_program(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["nodes"][0]["attrs"].update(name={"tuple": [{"tuple": [{"tuple": [[]] * 3}]}] * 4}),
        lambda d: d["nodes"][-1]["srcs"][0].__setitem__(0, 99),
        lambda d: d["nodes"][-1]["srcs"][0].__setitem__(0, len(d["nodes"]) - 1),  # a node reading itself
        lambda d: d["nodes"][0]["shape"].__setitem__(1, "9" * 5000),
        lambda d: d["outputs"].update(structure="dict"),
        lambda d: d.update(cost_bindings={"B": "7"}),
        lambda d: d["schedule"]["params"].append([0, "block", "__import__"]),
        lambda d: d.pop("kernels"),
        lambda d: next(n for n in d["nodes"] if n["op"] == "Constant")["attrs"].update(
            value="__import__('os').getpid()"
        ),
        lambda d: d["nodes"][0]["attrs"].update(shape={"tuple": ["B", 8]}),  # a dim as text to evaluate
    ],
)
def test_a_malformed_body_is_a_program_file_error(tmp_path, change):
    path = _saved(tmp_path)
    _forge(path, change)
    with pytest.raises(ProgramFileError):
        rc.load_program(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: _a_view(d).update(mask="-1"),
        lambda d: _a_view(d).update(mask=[["0", "1"]] * 3),  # a mask of another length than the shape
        lambda d: _a_view(d).update(mask=[["0", "1", "2"]] * len(_a_view(d)["shape"])),  # not pairs
        lambda d: _a_view(d).update(strides=["1"]),
        lambda d: _a_view(d).pop("offset"),
        lambda d: next(e for n in d["nodes"] for e in n["srcs"] if e[1]).__setitem__(1, "B**B"),
    ],
)
def test_a_malformed_view_is_a_program_file_error_before_the_graphs_are_compared(tmp_path, change):
    """The fuzzer's finding: a view's mask edited to three dims' worth of triples reached the saved
    graph's comparison with the caller's outputs, and raised a ValueError there."""
    path = _saved(tmp_path)
    _forge(path, change)
    with pytest.raises(ProgramFileError):
        rc.load_program(path, _double())
    with pytest.raises(ProgramFileError):
        rc.load_program(path)


def test_a_bad_cache_entry_is_rebuilt_and_compile_still_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_PROGRAM_CACHE_DIR", str(tmp_path))
    y = _double()
    first = rc.compile(y)
    path = program_cache.program_path(y, {}, rc.compiler.H200)
    assert path.is_file() and rc.load_program(path).source == first.source
    for damage in ["[" * 100000, path.read_text().replace('"B"', '"__import__(1)"')]:
        path.write_text(damage)
        again = rc.compile(y)
        np.testing.assert_array_equal(again.run(_feeds(), backend="emulator"), _feeds()["x"] * 2.0)
        assert rc.load_program(path).source == first.source  # written anew


# --- the key -------------------------------------------------------------------------------------
def test_the_cache_key_is_private_and_a_readable_one_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "c"))
    cache._key.cache_clear()
    first = cache.mac(b"data")
    key = tmp_path / "c" / cache.KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert cache.mac(b"data") == first != cache.mac(b"other")
    os.chmod(key, 0o644)  # others could read it, so forge with it: it no longer vouches for anything
    cache._key.cache_clear()
    assert cache.mac(b"data") != first and stat.S_IMODE(key.stat().st_mode) == 0o600
    cache._key.cache_clear()


def test_a_planted_library_with_a_plain_digest_stamp_is_rebuilt(tmp_path, monkeypatch):
    """Whoever can write the kernel cache could plant a library; a stamp is a MAC, so it is rebuilt."""
    import hashlib
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "c"))
    cache._key.cache_clear()
    prog = rc.compile(_double(), cache=False)
    emulator.clear_memory_cache()
    prog.run(_feeds(), backend="emulator")
    (lib,) = [p for p in (tmp_path / "c" / "emu").glob("*.so")]
    stamp = lib.with_name(lib.name + ".stamp")
    meta = {k: v for k, v in json.loads(stamp.read_text()).items() if k != "mac"}
    lib.unlink()  # not written in place: this process has the library mapped
    lib.write_bytes(b"\x7fELF planted")
    stamp.write_text(json.dumps({"sha256": hashlib.sha256(lib.read_bytes()).hexdigest(), **meta}))
    emulator.clear_memory_cache()
    before = emulator.gxx_invocations()
    again = rc.compile(_double(), cache=False)
    np.testing.assert_array_equal(again.run(_feeds(), backend="emulator"), _feeds()["x"] * 2.0)
    assert emulator.gxx_invocations() == before + 1
    cache._key.cache_clear()


# --- reports within the budget -------------------------------------------------------------------
def test_explain_prices_untaken_moves_within_its_budget(monkeypatch):
    monkeypatch.setattr(alternatives, "REPORT_SECONDS", 0.0)
    x = rc.input("x", ("B", 64))
    prog = rc.compile((x.exp() + 1.0).sum(-1) * 2.0, cache=False)
    assert "listing stopped after 0 s" in prog.explain()


def test_a_program_files_version_is_the_packages_and_the_distributions():
    """Program files carry refcomp.__version__ (read without importlib.metadata, which a compile
    would otherwise load): it must be pyproject.toml's, the version the distribution installs."""
    import tomllib

    from refcomp.exec.saved import refcomp_version

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    assert refcomp_version() == rc.__version__ == tomllib.loads(pyproject.read_text())["project"]["version"]
