"""Tensor-parallel decode (serving/parallel.py): the engine's prefill and decode programs compiled
on a tp=2 mesh with Megatron's layout give every request the greedy tokens it gets alone on one
device (tests/serving_oracle.py), on the simulated mesh and as two MPI processes under `mpirun -n 2`
(skipped, saying what to install, without mpirun or mpi4py)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import refcomp as rc
from refcomp.errors import RefcompError
from refcomp.serving.engine import Engine
from refcomp.serving.models import random_gpt2
from refcomp.serving.parallel import megatron_shardings
from refcomp.serving.scheduler import Scheduler
from serving_oracle import alone, prompt, tiny_model

REPO = Path(__file__).resolve().parent.parent
PROMPTS = [prompt(3), prompt(11, 1), prompt(6, 2)]
NEW = 6

SCRIPT = textwrap.dedent('''
    import json, sys
    import refcomp as rc
    from refcomp.serving.engine import Engine
    from refcomp.serving.scheduler import Scheduler
    from serving_oracle import prompt, tiny_model
    from mpi4py import MPI

    engine = Engine(tiny_model(), pages=16, page_size=4, backend="mpi", prefill_chunk=8,
                    mesh=rc.Mesh({"tp": 2}), device_backend=sys.argv[2])
    scheduler = Scheduler(engine, step_tokens=10)
    requests = [scheduler.add(p, 6, ignore_eos=True) for p in (prompt(3), prompt(11, 1), prompt(6, 2))]
    scheduler.run()
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump([r.out for r in requests], f)
''')


def test_tp2_on_a_simulated_mesh_gives_the_tokens_of_one_device():
    engine = Engine(tiny_model(), pages=16, page_size=4, backend="numpy", prefill_chunk=8,
                    mesh=rc.Mesh({"tp": 2}))
    scheduler = Scheduler(engine, step_tokens=10)
    requests = [scheduler.add(p, NEW, ignore_eos=True) for p in PROMPTS]
    scheduler.run()
    assert [r.out for r in requests] == [alone(tuple(p), NEW) for p in PROMPTS]
    program = engine.compiled("decode")
    assert engine.compiles == 2 and program.shardings["h.0.mlp.c_fc.weight"] == (None, "tp")
    assert [c.kind for c in program.collectives].count("AllReduceSum") == 2  # the two row-parallel matmuls


def test_megatron_layout_and_its_refusals():
    specs = megatron_shardings(tiny_model(), "tp", 2)
    assert specs["h.0.attn.c_attn.weight"] == (None, "tp:3")
    assert specs["h.0.mlp.c_proj.weight"] == ("tp", None)
    with pytest.raises(RefcompError, match="3 heads .* divide by 2"):
        megatron_shardings(random_gpt2(1, 12, 3, 16, 16), "tp", 2)
    with pytest.raises(RefcompError, match="one axis"):
        Engine(tiny_model(), pages=4, page_size=4, backend="numpy",
               mesh=rc.Mesh({"dp": 1, "tp": 2})).program("decode")


def _missing():
    if shutil.which("mpirun") is None:
        return "no mpirun on PATH: install Debian's openmpi-bin"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not importable: pip install mpi4py"
    return None


@pytest.mark.slow  # two Pythons importing refcomp and compiling on 2 cores: about 15 s
@pytest.mark.skipif(_missing() is not None, reason=_missing() or "")
def test_tp2_under_mpirun_gives_the_tokens_of_one_device(tmp_path):
    script, out = tmp_path / "tp_decode.py", tmp_path / "tokens.json"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["mpirun", "-n", "2", "--allow-run-as-root", "--oversubscribe", "--timeout", "170",
                           sys.executable, str(script), str(out), "numpy"],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(out.read_text()) == [alone(tuple(p), NEW) for p in PROMPTS]
