"""bench/decode_gpu_bench.py's decode step at a full context (every sequence context - 1 tokens in
its pages, the last one decoded), checked on the host emulator against the float64 NumPy reference:
the part of the GPU bench that needs no GPU, so that the GPU session's run can only fail on the GPU."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import decode_gpu_bench as bench  # noqa: E402


@pytest.mark.parametrize("batch,context", [(1, 40), (3, 37)])
def test_the_benchs_decode_step_matches_the_reference_on_the_emulator(batch, context):
    outputs, program, feeds = bench.decode_case(batch, context, page_size=16, sizes=bench.TINY)
    assert feeds["block_table"].shape == (batch, -(-context // 16))
    assert (feeds["slots"][:, 0] % 16 == (context - 1) % 16).all()  # the last position's slot
    assert any(k.carried for k in program.kernels)  # the q/k/v matmul writes the pool
    result = bench.checked_run(outputs, program, feeds, "emulator")
    assert result["same_tokens"] and result["max_logit_error"] < 1e-4
    held = bench.held_names(feeds)
    assert sorted(held) == sorted(n for n in feeds if n.startswith(("h.", "wte", "wpe", "ln_f", "kv_")))
    runner = bench.runner_time(program, feeds, 2, "emulator")  # fed and held runs, alternately
    assert runner["same_tokens"] and len(runner["resident_rounds_ms"]) == 2


def test_without_a_gpu_the_bench_says_so_and_exits_0(capsys):
    from refcomp.exec.pycuda_backend import pycuda_unavailable_reason
    if pycuda_unavailable_reason() is None:
        pytest.skip("a GPU is usable here: the bench would run (scripts/gpu_check.sh runs it)")
    assert bench.main(["--batches", "1", "--out", ""]) == 0
    assert "skipped: " in capsys.readouterr().out
