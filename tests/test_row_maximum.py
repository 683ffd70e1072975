"""A row's maximum computed by the matmul kernel that stores the row (codegen/row_maximum.py,
search/row_stats.py, templates/matmul_row_stats.cu.j2): a decode step's greedy choice, the argmax of
x @ w after the repetition penalty, at 5,000 columns (the maximum split in chunks), and a plain
maximum of a product's rows. Checked against NumPy written directly (float64) on the emulator, for
every template variant (K split across blocks or threads, both tiles) at bindings with part-full
tiles; NaN as NumPy's argmax takes it; the memory model's counts against the profiler's; bounds
under the sanitizer; nvcc for sm_90; the ticket back at zero for the next launch; a saved program."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.emulator import EmulatorBackend
from refcomp.exec.profile import model_disagreements
from refcomp.serving.sampling import greedy_graph
from fusion_checks import (ROW_END_VARIANTS, launch_split_twice, reparametrised, sanitized_run,
                           saved_and_loaded, variants_build_with_nvcc)

K, V = 48, 5000


def _feeds(rows: int, seed: int = 0, nan_column=None) -> dict:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, V)).astype(np.float32)
    if nan_column is not None:
        w[3, nan_column] = np.nan
    return {"x": rng.standard_normal((rows, K)).astype(np.float32), "w": w,
            "penalty": rng.uniform(0.5, 2.0, rows).astype(np.float32),
            "seen": (rng.random((rows, V)) < 0.3).astype(np.float32)}


def _want(feeds: dict) -> dict:
    logits = feeds["x"].astype(np.float64) @ feeds["w"]
    p = feeds["penalty"][:, None].astype(np.float64)
    scores = np.where(feeds["seen"] > 0, np.where(logits < 0, logits * p, logits / p), logits)
    return {"token": np.argmax(scores, -1).astype(np.float32), "logits": logits}


def _check(prog, rows: int, seed: int = 0, **kw) -> None:
    feeds = _feeds(rows, seed, **kw)
    got, want = prog.run(feeds, backend="emulator"), _want(feeds)
    np.testing.assert_array_equal(got["token"], want["token"])
    np.testing.assert_allclose(got["logits"], want["logits"], **golden.FLOAT32_TOLERANCE)


def _carrying(prog):
    return [k for k in prog.kernels if k.row_stats]


@pytest.fixture(scope="module")
def greedy():
    x = rc.input("x", ("B", K), ranges={"B": (1, 64)})
    logits = x @ rc.input("w", (K, V))
    outputs = {"token": greedy_graph(logits), "logits": logits}
    return outputs, rc.compile(outputs, dims_hint={"B": 32}, cache=False)


def test_the_matmul_storing_the_logits_takes_their_penalised_maximum(greedy):
    """Before: the penalised maximum was a kernel of its own over the logits and `seen` (its chunks,
    the last block of each row finishing it). After: the matmul computes the penalised score at each
    logit it stores and the rows' maximum; the argmax's second pass reads it."""
    outputs, prog = greedy
    (kernel,) = _carrying(prog)
    (final,) = kernel.row_stats
    assert final.op.name == "MaxReduce" and kernel.kind == "matmul" and kernel.launch.row_stats == 1
    assert "its rows' maximum" in str(kernel.launch) and "seen" in {n.attrs.get("name") for n in kernel.reads}
    assert len(prog.kernels) == 2 and final.id in {n.id for n in prog.kernels[1].reads}
    assert any(s.rule == "carry_row_stats" for s in prog.search.trace)
    again = rc.compile(outputs, dims_hint={"B": 32}, cache=False)
    assert again.source == prog.source  # deterministic
    for rows in (32, 1, 17, 40):  # one and several row tiles, the last part-full
        _check(prog, rows, seed=rows)


def test_a_nan_logit_is_the_choice_as_numpys_argmax_takes_it(greedy):
    """MaxReduce propagates NaN through the tiles' and the merge's maxima: the first NaN wins."""
    _, prog = greedy
    for column in (0, 2500, V - 1):
        _check(prog, 3, seed=column, nan_column=column)


@pytest.mark.parametrize("rows", [32, 33])
def test_the_memory_model_counts_what_the_profiler_counts(greedy, rows):
    _, prog = greedy
    assert model_disagreements(prog, prog.profile(_feeds(rows, seed=rows))) == []


@pytest.mark.parametrize("tile,splits,slices", ROW_END_VARIANTS)
def test_every_template_variant_computes_the_maximum(greedy, tile, splits, slices):
    prog, kernel = reparametrised(*greedy, _carrying, tile=tile, splits=splits, slices=slices)
    assert (kernel.launch.block, kernel.launch.splits, kernel.launch.slices) == (tile, splits, slices)
    for rows in (33, 2):
        _check(prog, rows, seed=tile + splits + rows)
    assert model_disagreements(prog, prog.profile(_feeds(33, seed=1))) == []


def test_the_tickets_are_zero_again_for_the_next_launch(greedy):
    prog, kernel = reparametrised(*greedy, _carrying, splits=4)
    feeds = _feeds(40, seed=9)
    assert kernel.launch.row_scratch(prog.bind(feeds)[1])[1] == -(-40 // kernel.launch.block)
    launch_split_twice(EmulatorBackend(), prog, kernel, feeds, _want(feeds))


@pytest.mark.parametrize("splits", [1, 4])
def test_every_access_stays_in_its_buffers(greedy, splits):
    prog, _ = reparametrised(*greedy, _carrying, splits=splits)
    feeds = _feeds(17, seed=11)
    np.testing.assert_array_equal(sanitized_run(prog, feeds)["token"], _want(feeds)["token"])


def test_the_kernels_build_with_nvcc(greedy):
    variants_build_with_nvcc(*greedy, _carrying)


def test_a_saved_program_loads_with_the_maximum(greedy, tmp_path):
    _, prog = greedy
    loaded = saved_and_loaded(prog, tmp_path / "p.json")
    assert [len(k.row_stats) for k in loaded.kernels] == [1, 0]
    feeds = _feeds(9, seed=5)
    np.testing.assert_array_equal(loaded.run(feeds, backend="emulator")["token"], _want(feeds)["token"])


def test_a_plain_maximum_of_the_products_rows():
    """Unsplit (300 columns), of the stored values themselves: the matmul stores the rows and their
    maximum; a maximum along M (the transpose's rows) is no row the tiles store, and stays apart."""
    x, w = rc.input("x", ("B", 64), ranges={"B": (1, 64)}), rc.input("w", (64, 300))
    y = x @ w
    prog = rc.compile({"y": y, "top": y.amax(-1), "down": y.T.amax(-1)}, dims_hint={"B": 32}, cache=False)
    (kernel,) = _carrying(prog)
    assert kernel.row_stats[0].attrs["axis"] == 1
    rng = np.random.default_rng(2)
    for rows in (32, 7):
        feeds = {"x": rng.standard_normal((rows, 64)).astype(np.float32),
                 "w": rng.standard_normal((64, 300)).astype(np.float32)}
        got, want = prog.run(feeds, backend="emulator"), feeds["x"].astype(np.float64) @ feeds["w"]
        np.testing.assert_allclose(got["top"], want.max(-1), **golden.FLOAT32_TOLERANCE)
        np.testing.assert_allclose(got["down"], want.max(0), **golden.FLOAT32_TOLERANCE)
