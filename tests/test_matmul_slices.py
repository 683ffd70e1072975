"""A matmul with K split across its block's threads (`slices`, threadIdx.z): each slice takes every
4th tile of K, and the slices' sums are added in shared memory before the store. A schedule that sets
it must give NumPy's values on the emulator, the profiler's counts, and source nvcc builds; the model
must see its four times the threads (GPT-2's q/k/v matmul at 32 rows: 10.3 -> 5.9 us modeled), and
the search must take it there (with K split across blocks too: tests/test_matmul_splits.py), and not
where the tiles alone fill the device."""
import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.profile import model_disagreements
from refcomp.pipeline.assemble import program_for_schedule


def _sliced(y, dims, tile=16, slices=4, along_k=False):
    result = rc.compile(y, dims_hint=dims, cache=False).search
    (group,) = [g for g in result.groups if g.kind == "matmul"]
    params = {(group.root.id, "tile"): tile, (group.root.id, "slices"): slices,
              (group.root.id, "b_along_k"): along_k, (group.root.id, "splits"): 1}
    return program_for_schedule(y, result, result.schedule.with_params(params))


@pytest.mark.parametrize("along_k", [False, True])
@pytest.mark.parametrize("k", [768, 100, 3000])  # whole slices of tiles, a ragged last tile, a long K
def test_a_sliced_matmul_matches_numpy_and_the_profiler(k, along_k):
    x, w, b = rc.input("x", ("B", k)), rc.input("w", (k, 160)), rc.input("b", (160,))
    y = (x @ w + b).relu()
    prog = _sliced(y, {"B": 256}, along_k=along_k)  # outputs enough that the search keeps one matmul
    (kernel,) = [kk for kk in prog.kernels if kk.kind == "matmul"]
    assert kernel.launch.slices == 4 and kernel.launch.geometry({"B": 5})[1] == (16, 16, 4)
    rng = np.random.default_rng(k)
    feeds = {"x": rng.standard_normal((5, k)).astype(np.float32),
             "w": (rng.standard_normal((k, 160)) / np.sqrt(k)).astype(np.float32),
             "b": rng.standard_normal(160).astype(np.float32)}
    want = np.maximum(feeds["x"].astype(np.float64) @ feeds["w"] + feeds["b"], 0)
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), want, **golden.FLOAT32_TOLERANCE)
    assert model_disagreements(prog, prog.profile(feeds)) == []


def test_slices_quadruple_the_threads_of_a_skinny_matmul_and_build_with_nvcc():
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    x, w, b = rc.input("x", ("B", 768)), rc.input("w", (768, 2304)), rc.input("b", (2304,))
    y = x @ w + b
    plain, sliced = _sliced(y, {"B": 32}, slices=1), _sliced(y, {"B": 32})
    assert sliced.kernels[0].cost.threads == 4 * plain.kernels[0].cost.threads
    assert sliced.kernels[0].cost.time_s < 0.5 * plain.kernels[0].cost.time_s
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    assert set(nvcc_check(sliced.source).kernels) == {k.name for k in sliced.kernels}


def test_only_a_plain_matmul_of_at_most_1024_threads_a_block_is_sliced():
    """Code generation refuses the rest (Unfusable), and the evaluator prices such a choice as
    impossible (codegen.lower.retarget: None)."""
    from refcomp.codegen.tiled import sliced_problem
    assert sliced_problem("matmul.cu.j2", 0, 16, 4) is None
    assert "1024" in sliced_problem("matmul.cu.j2", 0, 32, 4)
    assert "plain matmul" in sliced_problem("softmax_matmul.cu.j2", 0, 16, 4)
    assert "plain matmul" in sliced_problem("matmul.cu.j2", 2, 16, 4)


def test_the_search_splits_a_skinny_matmul_with_the_layer_norm_in_its_prologue():
    """GPT-2's layer norm then q/k/v at 32 rows: one matmul kernel computing each row's statistics in
    its prologue, K split across blocks (9.0 us modeled), cheaper than the row kernel and a sliced
    matmul (10.8 us, the choice before blocks could split K: tests/test_matmul_splits.py) and than the
    statistics in two kernels with the normalised rows recomputed in the matmul's loads (15.5). At
    1,024 rows the tiles fill the device and K is neither sliced nor split."""
    x, w, b = rc.input("x", ("B", 768)), rc.input("w", (768, 2304)), rc.input("b", (2304,))
    g, beta = rc.input("g", (768,)), rc.input("beta", (768,))
    y = rc.nn.layer_norm(x, (768,), g, beta) @ w + b
    prog = rc.compile(y, dims_hint={"B": 32}, cache=False)
    (kernel,) = prog.kernels
    assert kernel.kind == "matmul" and kernel.plan.prologue_phases, prog.explain()
    assert kernel.launch.splits > 1
    assert prog.cost.time_s < 10e-6
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal((5, 768)).astype(np.float32),
             "w": (rng.standard_normal((768, 2304)) / 28).astype(np.float32),
             "b": rng.standard_normal(2304).astype(np.float32),
             "g": rng.standard_normal(768).astype(np.float32),
             "beta": rng.standard_normal(768).astype(np.float32)}
    f = {k: v.astype(np.float64) for k, v in feeds.items()}
    h = (f["x"] - f["x"].mean(1, keepdims=True)) / np.sqrt(f["x"].var(1, keepdims=True) + 1e-5)
    want = (h * f["g"] + f["beta"]) @ f["w"] + f["b"]
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), want, rtol=1e-4, atol=1e-4)
    wide = rc.compile(y, dims_hint={"B": 1024}, cache=False)
    assert all(k.launch.slices == 1 and k.launch.splits == 1 for k in wide.kernels)
