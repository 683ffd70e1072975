"""Measured mode (refcomp.measure) and the search benchmark's table.

Without a GPU: the error that names what is missing, the feeds and the reference check (run on
the host emulator), and bench/search_bench.py on a tiny workload. With PyCUDA and a device:
measured mode returns a program whose outputs match the reference.
"""
import importlib.util
import inspect
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.pipeline.assemble import program_for_schedule
from refcomp.errors import RefcompError
from refcomp import measure
from refcomp.search.search import search

ROOT = Path(__file__).resolve().parent.parent
_reason = measure.gpu_unavailable_reason()
_compile_measures = "measure" in inspect.signature(rc.compile).parameters
needs_gpu = pytest.mark.skipif(
    _reason is not None, reason=f"measured mode needs PyCUDA and a device: {_reason}"
)
needs_no_gpu = pytest.mark.skipif(
    _reason is None, reason="a GPU is usable here, so the no-GPU error cannot happen"
)
needs_wiring = pytest.mark.skipif(not _compile_measures, reason="rc.compile has no measure= parameter yet "
                                  "(the proposed change to refcomp/exec/program.py is not applied)")


def _softmax(width=64):
    return rc.input("x", ("B", width)).softmax(-1)


def _search(y, hint):
    return search([y.edge], hint, progress=False)


# --- without a GPU -------------------------------------------------------------------------------
@needs_no_gpu
def test_measured_mode_without_a_gpu_names_what_is_missing():
    y = _softmax()
    with pytest.raises(RefcompError, match="measure=True") as info:
        measure.compile_measured(y, {"B": 32})
    assert "pycuda" in str(info.value).lower() or "cuda" in str(info.value).lower()
    result = _search(y, {"B": 32})
    with pytest.raises(RefcompError, match="GPU"):
        measure.measure_candidates(y, result, result.bindings)


@needs_no_gpu
@needs_wiring
def test_compile_measure_true_without_a_gpu_raises():
    with pytest.raises(RefcompError, match="pycuda|CUDA"):
        rc.compile(_softmax(), measure=True)


def test_feeds_have_ids_in_range_and_scaled_weights():
    ids = rc.input("ids", ("B", "T"), dtype="int32")
    table = rc.input("table", (50, 16))
    w = rc.input("w", (8, 16))
    y = rc.nn.linear(rc.nn.embedding(ids, table), w)
    feeds = measure.make_feeds(y, {"B": 3, "T": 5}, seed=0)
    assert feeds["ids"].dtype == np.int32 and feeds["ids"].shape == (3, 5)
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 50
    assert feeds["table"].dtype == np.float32 and feeds["w"].shape == (8, 16)
    assert feeds["w"].std() < 0.5  # 1/sqrt(16): a weight is scaled by its fan-in
    given = np.ones((8, 16), np.float32)
    assert measure.make_feeds(y, {"B": 3, "T": 5}, fixed={"w": given})["w"] is given


def test_check_binding_caps_every_symbol():
    assert measure.check_binding({"B": 1024, "T": 7}) == {"B": measure.CHECK_DIM_CAP, "T": 7}


def test_reference_check_passes_every_candidate_and_catches_a_wrong_program():
    y = _softmax()
    result = _search(y, {"B": 512})
    check = measure.ReferenceCheck.build(y, result.bindings, result=result)
    assert check.dims == {"B": measure.CHECK_DIM_CAP}
    for sched in result.candidates:
        assert check.problems(program_for_schedule(y, result, sched), backend="emulator") == []
    x = rc.input("x", ("B", 64))
    wrong = rc.compile(x.exp(), search=False)
    assert check.problems(wrong, backend="emulator")


def test_pick_prefers_the_model_unless_clearly_beaten():
    def m(i, s):
        return measure.Measurement(i, None, None, 0.0, measure.Timing(s, [s], []))
    assert measure.pick([m(0, 1.0), m(1, 0.99)]).index == 0
    assert measure.pick([m(0, 1.0), m(1, 0.5)]).index == 1
    failed = measure.Measurement(0, None, None, 0.0, None, ["wrong"])
    assert measure.pick([failed, m(1, 2.0)]).index == 1
    with pytest.raises(RefcompError):
        measure.pick([failed])


# --- with a GPU ----------------------------------------------------------------------------------
def _assert_matches_reference(prog, y, rows):
    x = np.random.default_rng(3).standard_normal((rows, 64)).astype(np.float32)
    got = prog.run({"x": x}, backend="pycuda")
    want = rc.evaluate(y, {"x": x}, precision="float64")
    assert golden.compare({"y": got}, {"y": want}, golden.FLOAT32_TOLERANCE) == []


@pytest.mark.gpu
@needs_gpu
def test_measure_candidates_times_every_candidate():
    y = _softmax()
    result = _search(y, {"B": 256})
    measured = measure.measure_candidates(y, result, repeats=3, warmup=1)
    assert len(measured) == len(result.candidates)
    assert all(seconds > 0 for _, seconds in measured)
    assert measured[0][0] is result.candidates[0]


@pytest.mark.gpu
@needs_gpu
def test_measured_program_matches_the_reference():
    y = _softmax()
    prog = measure.compile_measured(y, {"B": 256}, repeats=3, warmup=1)
    assert (
        len(prog.measured) == len(prog.search.candidates) and prog.measured[0][0] is prog.search.candidates[0]
    )
    _assert_matches_reference(prog, y, 256)
    _assert_matches_reference(prog, y, 5)  # and at another binding of the symbolic B


@pytest.mark.gpu
@needs_gpu
@needs_wiring
def test_compile_measure_true_matches_the_reference():
    y = _softmax()
    prog = rc.compile(y, measure=True, dims_hint={"B": 256})
    _assert_matches_reference(prog, y, 256)


# --- the search benchmark ------------------------------------------------------------------------
def _load_bench():
    spec = importlib.util.spec_from_file_location("search_bench", ROOT / "bench" / "search_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_search_bench_table_on_a_tiny_workload():
    bench = _load_bench()
    tiny = bench.Workload(
        "tiny_softmax", lambda: (rc.input("x", ("B", 8)).softmax(-1), {}), {"B": 4}, 1, 1.25
    )
    missing = bench.Workload(
        "tiny_missed", lambda: (rc.input("x", ("B", 8)).softmax(-1), {}), {"B": 4}, 0, None
    )
    rows = bench.bench_rows([tiny, missing], repeats=1)
    table = bench.format_table(rows)
    assert "tiny_softmax" in table and "tiny_missed" in table
    assert rows[0].kernels_search == 1 and rows[0].kernels_plain > 1 and not rows[0].missed
    assert rows[0].predicted_before_s > rows[0].predicted_after_s > 0
    assert rows[1].missed and "MISSED" in table and "MISSED" in bench.format_misses(rows)
    data = json.loads(json.dumps(bench.to_json(rows)))
    assert [w["name"] for w in data["workloads"]] == ["tiny_softmax", "tiny_missed"]
    assert data["targets_missed"][0]["workload"] == "tiny_missed"
