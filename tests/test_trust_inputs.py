"""Files, models, names and CLI arguments are untrusted input: each of these once escaped as a file
read from the wrong folder, a NumPy traceback, a C line injected into generated source, or a feed
ONNX allows being refused (issue 27, items 6, 9, 11 and 12)."""
from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX tests need the onnx package (pip install onnx)")
from onnx import TensorProto as TP  # noqa: E402
from onnx import external_data_helper  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from refcomp import onnx as ro  # noqa: E402
from refcomp.errors import RefcompError  # noqa: E402


def _model(nodes, inputs, outputs, initializers=()):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _vi(name, shape, etype=TP.FLOAT):
    return h.make_tensor_value_info(name, etype, list(shape))


# --- 6. external data ----------------------------------------------------------------------------
def _external_model(location: str):
    w = nh.from_array(np.arange(6, dtype=np.float32), "w")
    external_data_helper.set_external_data(w, location)
    w.ClearField("raw_data")
    w.data_location = TP.EXTERNAL
    return _model([h.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [6])], [_vi("y", [6])], [w])


@pytest.mark.parametrize("as_bytes", [True, False])
def test_a_model_without_a_path_never_reads_external_data_from_the_working_folder(
    tmp_path, monkeypatch, as_bytes
):
    (tmp_path / "data.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    m = _external_model("data.bin")
    given = m.SerializeToString() if as_bytes else m
    with pytest.raises(RefcompError, match=r"tensor 'w' .*'data.bin'.*base_dir="):
        ro.import_model(given)
    imported = ro.import_model(given, base_dir=str(tmp_path))  # named, the folder is read
    np.testing.assert_array_equal(imported.weights["w"], np.arange(6, dtype=np.float32))
    assert external_data_helper.uses_external_data(
        m.graph.initializer[0]
    )  # the caller's proto is left as it was


@pytest.mark.parametrize("location", ["../../etc/passwd", "../data.bin", "/etc/passwd", "link.bin"])
def test_a_files_external_data_cannot_escape_its_folder(tmp_path, location):
    (tmp_path / "data.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "link.bin").symlink_to(tmp_path / "data.bin")
    (folder / "m.onnx").write_bytes(_external_model(location).SerializeToString())
    with pytest.raises(
        RefcompError, match=r"m.onnx.*tensor 'w'.*(outside the directory|not a relative path)"
    ):
        ro.import_model(str(folder / "m.onnx"))
    with pytest.raises(RefcompError, match="tensor 'w'"):  # a folder named for bytes follows the same rule
        ro.import_model(_external_model(location).SerializeToString(), base_dir=str(folder))


# --- 9. shapes too large to index ----------------------------------------------------------------
def test_a_huge_static_shape_is_an_allocation_error_before_pricing():
    import refcomp as rc
    y = rc.input("x", (4,)).broadcast_to((2**40, 2**40, 4))
    for outputs in (y, y * 2.0, y.sum(axis=-1)):
        for search in (False, True):
            with pytest.raises(rc.AllocationError, match=r"shape \(1099511627776, 1099511627776.*2\^60"):
                rc.compile(outputs, search=search, cache=False)
    t = rc.input("t", ("T",))
    square = t.reshape(("T", 1)).broadcast_to(("T", "T")).sum(axis=-1)
    with pytest.raises(
        rc.AllocationError, match=r"\(T, T\) at T=4294967296"
    ):  # a hint the model would price at
        rc.compile(square, dims_hint={"T": 2**32}, cache=False)


def test_an_onnx_expand_to_a_huge_shape_is_an_allocation_error():
    import refcomp as rc
    shape = nh.from_array(np.array([2**40, 2**40], np.int64), "shape")
    m = ro.import_model(_model([h.make_node("Expand", ["x", "shape"], ["y"], name="expand")], [_vi("x", [1])],
                               [_vi("y", [2**40, 2**40])], [shape]))
    with pytest.raises(rc.AllocationError, match="2\\^60"):
        m.compile()


# --- 11. refcomp run --feeds ---------------------------------------------------------------------
MODEL = '''
import refcomp as rc

def tiny():
    x = rc.input("x", ("B", "T"))
    return {"y": (x * 2.0).relu(), "s": x.sum(axis=-1)}
'''
X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
_OBJECTS = np.empty(2, dtype=object)
_OBJECTS[:] = [[1], "a"]

MALFORMED_FEEDS = {
    "dims_array": ({"in.x": X, "dims.B": np.array([3, 4])}, "'dims.B' must be one non-negative integer"),
    "dims_string": ({"in.x": X, "dims.B": np.array("three")}, "'dims.B' must be one non-negative integer"),
    "dims_float": ({"in.x": X, "dims.B": np.array(3.5)}, "got 3.5"),
    "dims_bool": ({"in.x": X, "dims.B": np.array(True)}, "got True"),
    "dims_negative": ({"in.x": X, "dims.B": np.array(-3)}, "got -3"),
    "strings": ({"x": np.array([["a"] * 4] * 3)}, "input 'x' takes float32"),
    "ints": ({"x": np.ones((3, 4), np.int64)}, "input 'x' takes float32"),
    "objects": ({"x": _OBJECTS}, "allow_pickle=False"),  # np.load never unpickles
    "missing": ({"in.z": X}, "'z' matches no input"),
    "rank": ({"x": X[0]}, "expects 2 axes"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_FEEDS))
def test_malformed_feeds_are_one_line_usage_errors(tmp_path, capsys, case):
    from refcomp.cli import main
    (tmp_path / "model.py").write_text(MODEL)
    arrays, says = MALFORMED_FEEDS[case]
    np.savez(tmp_path / "feeds.npz", **arrays)
    status = main(
        [
            "run",
            f"{tmp_path / 'model.py'}:tiny",
            "--feeds",
            str(tmp_path / "feeds.npz"),
            "--backend",
            "numpy",
            "--no-search",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("refcomp: error: ") and err.count("\n") == 1 and says in err, err


def _npy(array) -> bytes:
    import io
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


@pytest.mark.parametrize("write, says", [
    (lambda p: p.write_bytes(_npy(X)), "a .npy file holds one unnamed array"),
    (lambda p: p.write_bytes(b""), "not a readable .npz"),
    (lambda p: p.write_bytes(b"PK\x03\x04 truncated zip"), "not a readable .npz"),
])
def test_a_feeds_file_that_is_no_archive_of_arrays_is_a_usage_error(tmp_path, capsys, write, says):
    from refcomp.cli import main
    (tmp_path / "model.py").write_text(MODEL)
    feeds = tmp_path / "feeds.npz"
    write(feeds)
    assert main(["run", f"{tmp_path / 'model.py'}:tiny", "--feeds", str(feeds), "--backend", "numpy"]) == 2
    assert says in capsys.readouterr().err


def test_a_dims_array_in_feeds_exits_2_without_a_traceback(tmp_path):
    import subprocess
    import sys
    (tmp_path / "model.py").write_text(MODEL)
    np.savez(tmp_path / "feeds.npz", **{"in.x": X, "dims.B": np.array([3, 4])})
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "refcomp",
            "run",
            "model.py:tiny",
            "--feeds",
            "feeds.npz",
            "--backend",
            "numpy",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and "'dims.B'" in done.stderr, done.stderr


# --- 12. names in generated source, file names, overridable initializers -------------------------
def test_a_file_name_with_a_newline_cannot_inject_a_line_of_cuda(tmp_path):
    import refcomp as rc
    from refcomp.cli_run import call_in_file
    path = tmp_path / "model\n#error injected\r\\\n.py"
    path.write_text("import refcomp as rc\n\ndef f():\n    return rc.input('x', (4, 8)).softmax(-1)\n")
    program = rc.compile(call_in_file(str(path), "f"), cache=False)
    lines = program.source.splitlines()
    assert not any(line.lstrip().startswith("#error") for line in lines)
    assert any("user ops: softmax (model\\x0a#error injected\\x0d" in line for line in lines), program.source
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    got = program.run({"x": x}, backend="emulator")  # the emulator's g++ build of the same source
    want = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=1e-5)


def test_comment_text_keeps_user_text_inside_one_comment_line():
    from refcomp.codegen.cprint import comment_text
    for text in ("a\nb", "a\r\nb", "a\u2028b", "a\x00b", "ends in \\", "*/ x /*", "tab\there"):
        safe = comment_text("// " + text)
        assert safe.isprintable() and "*/" not in safe and "/*" not in safe[2:] and not safe.endswith("\\"), (
            safe
        )
    assert comment_text("// plain k2_softmax (model.py:12)") == "// plain k2_softmax (model.py:12)"


@pytest.mark.parametrize("name", ["x\n", "x\nrm", "bad/name", ""])
def test_golden_add_refuses_a_name_with_a_newline_and_writes_nothing(tmp_path, capsys, name):
    from refcomp.cli import main
    (tmp_path / "model.py").write_text(MODEL)
    store = tmp_path / "cases"
    assert main(["golden", "add", f"{tmp_path / 'model.py'}:tiny", "--name", name, "--dir", str(store),
                 "--dims", "B=2,T=3"]) == 2
    assert "--name" in capsys.readouterr().err
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.parametrize(
    "dims", ["B=\u00b2", "B=\u0663"]
)  # str.isdigit() takes both; int() refuses the first
def test_dims_take_ascii_digits_only(dims, capsys):
    from refcomp.cli import main
    assert main(["run", "nn_layer_norm", "--backend", "numpy", "--dims", dims]) == 2
    assert "NAME=INT" in capsys.readouterr().err


def _both_ways(m, feeds):
    """refcomp's outputs and onnx.reference's, for the same feeds."""
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(m).run(None, feeds)
    got = ro.import_model(m).evaluate(feeds)
    return [got[o.name] for o in m.graph.output], want


@pytest.mark.parametrize("values", [[2.0, 2.0, 2.0], [1.0, 2.0, 3.0]])
def test_an_input_with_an_initializer_stays_an_input_that_a_feed_overrides(values):
    w = nh.from_array(np.array(values, np.float32), "w")
    m = _model(
        [h.make_node("Mul", ["x", "w"], ["y"], name="mul")],
        [_vi("x", [3]), _vi("w", [3])],
        [_vi("y", [3])],
        [w],
    )
    x = np.array([1.0, -2.0, 0.5], np.float32)
    for feeds in ({"x": x}, {"x": x, "w": np.array([5.0, -1.0, 0.25], np.float32)}):
        got, want = _both_ways(m, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    imported = ro.import_model(m)
    assert imported.inputs["w"].node.op.name == "Input"  # never folded to a Constant, though uniform
    overridden = imported.run({"x": x, "w": np.ones(3, np.float32)}, backend="emulator")["y"]
    np.testing.assert_allclose(overridden, x)


def test_an_input_with_an_initializer_read_at_import_time_refuses_another_value():
    shape = nh.from_array(np.array([2, 3], np.int64), "shape")
    m = _model(
        [h.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        [_vi("x", [6]), _vi("shape", [2], TP.INT64)],
        [_vi("y", [2, 3])],
        [shape],
    )
    x = np.arange(6, dtype=np.float32)
    got, want = _both_ways(
        m, {"x": x, "shape": np.array([2, 3], np.int64)}
    )  # the initializer's own value: fine
    np.testing.assert_array_equal(got[0], want[0])
    with pytest.raises(RefcompError, match=r"'shape'.*read at import time.*constants="):
        ro.import_model(m).evaluate({"x": x, "shape": np.array([3, 2], np.int64)})
    fixed = ro.import_model(m, constants={"shape": np.array([3, 2], np.int64)})
    assert fixed.evaluate({"x": x})["y"].shape == (3, 2)


def test_a_float_input_with_an_initializer_that_must_be_static_is_pinned():
    scales = nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    m = _model([h.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="nearest")],
               [_vi("x", [1, 1, 2, 2]), _vi("scales", [4])], [_vi("y", [1, 1, 4, 4])], [scales])
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    got, want = _both_ways(m, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    assert "scales" in ro.import_model(m).pinned


def test_a_pinned_integer_input_used_as_gather_indices_takes_its_own_value_as_a_feed():
    ids = nh.from_array(np.array([3, 0], np.int64), "ids")
    m = _model([h.make_node("Gather", ["table", "ids"], ["y"], name="gather")],
               [_vi("table", [4, 3]), _vi("ids", [2], TP.INT64)], [_vi("y", [2, 3])], [ids])
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    for feeds in ({"table": table}, {"table": table, "ids": np.array([3, 0], np.int64)}):
        got, want = _both_ways(m, feeds)
        np.testing.assert_array_equal(got[0], want[0])
    with pytest.raises(RefcompError, match="'ids'.*constants="):
        ro.import_model(m).evaluate({"table": table, "ids": np.array([1, 1], np.int64)})
