"""The compiled Program as data: kernel names from user ops, costs, repr, files and the program cache."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc
from refcomp.exec.saved import ProgramFileError

ROOT = Path(__file__).resolve().parent.parent


def _block(d=32):
    x = rc.input("x", ("B", d))
    w = rc.input("w", (d, d))
    return rc.nn.layer_norm(x) @ w  # line numbers of this file appear in kernel comments


def _feeds(b=3, d=32, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((b, d)).astype(np.float32),
        "w": rng.standard_normal((d, d)).astype(np.float32),
    }


def test_kernels_are_named_after_the_user_ops_they_compute():
    x = rc.input("x", ("B", 32))
    prog = rc.compile(x.softmax(-1), cache=False)
    assert [k.name for k in prog.kernels] == ["k0_softmax"]
    assert prog.kernels[0].ops == ("softmax",)
    searched = rc.compile(_block(), cache=False)
    assert all(k.name.startswith(f"k{i}_") for i, k in enumerate(searched.kernels))
    assert {"layer_norm", "matmul"} <= {op for k in searched.kernels for op in k.ops}
    plain = rc.compile(x.sin() + 1.0, search=False)
    assert [k.name for k in plain.kernels] == ["k0_sin", "k1_add"]


def test_kernel_comments_name_the_user_ops_and_this_file():
    prog = rc.compile(_block(), cache=False)
    lines = [ln for ln in prog.source.splitlines() if ln.startswith("//   user ops:")]
    assert lines and all("test_program.py:" in ln for ln in lines)
    line = int(lines[0].split("test_program.py:")[1].split(")")[0])
    assert "layer_norm" in Path(__file__).read_text().splitlines()[line - 1]


def test_kernels_carry_launch_cost_and_a_one_line_repr():
    prog = rc.compile(_block(), cache=False)
    for k in prog.kernels:
        assert k.cost.bytes > 0 and k.cost.time_s > 0 and k.source.lstrip().startswith("//")
        grid, block = k.launch.geometry({"B": 3})
        assert grid[0] >= 1 and block[0] >= 1
        assert "\n" not in repr(k) and k.name in repr(k)
    total = prog.cost
    assert total.bytes == sum(k.cost.bytes for k in prog.kernels)
    assert total.time_s == pytest.approx(sum(k.cost.time_s for k in prog.kernels))
    # the search priced graph groups; the program re-prices each built kernel from its own accesses
    assert all(k.cost.l2_bytes > 0 for k in prog.kernels)
    assert prog.search.time_s > 0 and [k.cost.flops for k in prog.kernels] == [
        c.flops for c in prog.search.costs
    ]


def test_plain_programs_are_priced_too():
    x = rc.input("x", (1 << 20,))
    prog = rc.compile((x * 2.0 + 1.0).sum(), search=False)
    assert [k.cost.bytes for k in prog.kernels][0] == 2 * 4 * (1 << 20)  # read x, write x*2
    assert "search=False" in prog.cost_summary()


def test_cost_summary_columns_fit_large_numbers():
    x = rc.input("x", (4096, 4096))
    y = x @ x
    table = rc.compile(y, cache=False).cost_summary().splitlines()[1:-1]
    assert len({len(line) for line in table}) == 1  # every row as wide as the header: nothing overflows
    assert any(
        len(line.split()[4]) > 12 for line in table[1:]
    )  # 137,438,953,472 flops: wider than the old column


def test_tensor_repr_shows_the_user_op():
    x = rc.input("x", ("B", 32))
    assert repr(x.softmax(-1)) == "<Tensor softmax (B, 32) float32>"
    assert repr(x) == "<Tensor input 'x' (B, 32) float32>"
    assert repr(rc.input("ids", (4,), dtype="int32")) == "<Tensor input 'ids' (4,) int32>"
    assert repr(x + 1.0) == "<Tensor add (B, 32) float32>"


def test_joins_name_their_nodes_after_the_join():
    """concat is made of pads and adds; its nodes still carry its own name (kernel names, comments)."""
    x, y = rc.input("x", (2, 3)), rc.input("y", (2, 3))
    assert repr(rc.concat([x, y])) == "<Tensor concat (4, 3) float32>"
    assert repr(rc.cat([x, y], 1)) == "<Tensor cat (2, 6) float32>"
    assert repr(rc.stack([x, y])) == "<Tensor stack (2, 2, 3) float32>"


# --- program files -----------------------------------------------------------------------------
def test_a_saved_program_runs_without_search_and_refuses_what_the_original_refuses(tmp_path, monkeypatch):
    prog = rc.compile(_block(), cache=False)
    path = tmp_path / "block.json"
    prog.save(path)
    from refcomp.search import search as search_module
    monkeypatch.setattr(search_module, "search", lambda *a, **k: pytest.fail("load_program searched"))
    loaded = rc.load_program(path)
    assert loaded.source == prog.source and [k.name for k in loaded.kernels] == [k.name for k in prog.kernels]
    feeds = _feeds()
    np.testing.assert_array_equal(loaded.run(feeds), prog.run(feeds))
    np.testing.assert_allclose(loaded.run(feeds, backend="numpy"), rc.evaluate(_block(), feeds), rtol=1e-6)
    bad = dict(feeds, w=feeds["w"][:, :5])
    with pytest.raises(rc.FeedError) as original:
        prog.run(bad)
    with pytest.raises(rc.FeedError) as reloaded:
        loaded.run(bad)
    assert str(original.value) == str(reloaded.value)
    assert loaded.cost.bytes == prog.cost.bytes and "kernels:" in loaded.explain()
    data = json.loads(path.read_text())
    assert data["format"] == "refcomp-program" and isinstance(data["kernels"][0]["source"], list)
    # a file a person can read and diff: each node on a line of its own, each line of C on its own
    lines = path.read_text().splitlines()
    assert sum(line.startswith('{"op": ') for line in lines) == len(data["nodes"])
    for kernel in data["kernels"]:
        assert all(json.dumps(c) in lines or json.dumps(c) + "," in lines for c in kernel["source"] if c)


def test_a_saved_view_program_keeps_its_binding_rules(tmp_path):
    x = rc.input("x", ("B", "T"))
    y = x[:, 3] * 2.0
    path = tmp_path / "view.json"
    rc.compile(y, cache=False).save(path)
    loaded = rc.load_program(path)
    with pytest.raises(rc.BindingError) as err:
        loaded.run({"x": np.zeros((2, 2), np.float32)})
    with pytest.raises(
        rc.BindingError
    ) as ref:  # the saved graph's own reference (its nodes are numbered anew)
        loaded.run({"x": np.zeros((2, 2), np.float32)}, backend="numpy")
    assert str(err.value) == str(ref.value) and "T=2" in str(err.value)
    np.testing.assert_array_equal(loaded.run({"x": np.ones((2, 5), np.float32)}), np.full(2, 2.0, np.float32))


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda p: _edit(p, lambda d: d["kernels"][0]["source"].append("// edited")),
            "does not carry this user.s MAC",
        ),
        (lambda p: _edit(p, lambda d: d.update(version="0.0.1")), "was saved by refcomp 0.0.1"),
        (lambda p: _edit(p, lambda d: d.pop("format")), "is not a refcomp program file"),
        (lambda p: p.write_text(p.read_text()[:100]), "cannot read the program file"),
        (lambda p: p.write_bytes(b"\xff\xfe"), "cannot read the program file"),
    ],
)
def test_a_damaged_or_foreign_program_file_is_refused(tmp_path, damage, message):
    path = tmp_path / "p.json"
    rc.compile(_block(), cache=False).save(path)
    damage(path)
    with pytest.raises(ProgramFileError, match=message) as err:
        rc.load_program(path)
    assert str(path) in str(err.value) and isinstance(err.value, rc.RefcompError)


def test_a_missing_program_file_is_a_refcomp_error(tmp_path):
    with pytest.raises(ProgramFileError, match="cannot read"):
        rc.load_program(tmp_path / "nothing.json")


def test_compile_leaves_the_garbage_collector_as_it_found_it():
    """A compile freezes older objects and collects the young ones less often
    (compiler._older_objects_frozen), then puts back the caller's thresholds and frozen objects,
    collection switched off included."""
    import gc
    x = rc.input("x", ("B", 16))
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    try:
        for threshold in [(700, 10, 10), (0, 10, 10), (50000, 5, 5)]:
            gc.set_threshold(*threshold)
            rc.compile(x.softmax(-1), cache=False)
            assert gc.get_threshold() == threshold and gc.get_freeze_count() == frozen
    finally:
        gc.set_threshold(*before)


# --- the program cache ---------------------------------------------------------------------------
_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
import refcomp as rc
from refcomp.search import search as search_module
searched = []
original = search_module.search
search_module.search = lambda *a, **k: searched.append(1) or original(*a, **k)
import refcomp.compiler as compiler
compiler.run_search = search_module.search
from examples.gpt2_block import build_block
y, _ = build_block()
prog = rc.compile(y, dims_hint={{"B": 2, "T": 8}})
print(len(searched), prog.search is None, len(prog.source))
"""


def test_a_second_process_loads_the_searched_program_instead_of_searching(tmp_path):
    env = {"REFCOMP_PROGRAM_CACHE_DIR": str(tmp_path)}
    run = lambda: subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, **env},
    ).stdout.split()
    first, second = run(), run()
    assert first[:2] == ["1", "False"] and second[:2] == ["0", "True"] and first[2] == second[2]
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_the_cache_is_keyed_by_the_graph_the_hint_and_bypassed_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_PROGRAM_CACHE_DIR", str(tmp_path))
    x = rc.input("x", ("B", 16))
    softmax = lambda: x.softmax(-1)  # built from one line: kernel comments name the user's line
    first = rc.compile(softmax())
    again = rc.compile(softmax())
    assert first.search is not None and again.search is None and again.source == first.source
    assert rc.compile(softmax(), dims_hint={"B": 4096}).search is not None  # another binding to price at
    assert rc.compile(x.log_softmax(-1)).search is not None  # another graph
    assert rc.compile(x.softmax(-1)).search is not None  # the same graph built on another line
    assert rc.compile(softmax(), cache=False).search is not None
    feeds = {"x": np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)}
    np.testing.assert_array_equal(again.run(feeds), first.run(feeds))
    for f in tmp_path.glob("*.json"):  # a damaged entry is a miss, written again
        f.write_text("{")
    assert rc.compile(softmax()).search is not None and rc.compile(softmax()).search is None


def test_memory_plans_are_kept_for_a_bounded_number_of_bindings():
    """A decode loop binds a new length every step: the plans worked out per binding must not pile up,
    and a binding dropped from the memo is worked out again to the same plan."""
    from refcomp.exec.program import SIZED_BINDINGS
    x = rc.input("x", ("T", 4))
    prog = rc.compile((x * 2.0).sum(-1))
    first = prog.memory_plan({"T": 1})
    for t in range(1, SIZED_BINDINGS + 10):
        out = prog.run({"x": np.full((t, 4), 1.0, np.float32)}, backend="numpy")
        np.testing.assert_array_equal(out, np.full(t, 8.0, np.float32))
        prog.memory_plan({"T": t})
    assert len(prog._at) <= SIZED_BINDINGS
    assert prog.memory_plan({"T": 1}) == first
