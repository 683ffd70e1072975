#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, install PyCUDA, run every GPU test (all golden
# cases through PyCUDA, plain and searched), the GPU benchmark and the GPT-2 block, and summarise.
#
#   bash scripts/gpu_check.sh [WHEELS]
#
# WHEELS (optional) is a folder holding either a prebuilt pycuda wheel or the pycuda sdist, plus
# its dependency wheels (pytools, platformdirs, mako, siphash24): for machines without internet.
# Without it, pycuda is installed from PyPI. Results go to $OUT (if set) and bench/results/.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-}
RESULTS=bench/results
mkdir -p "$RESULTS"
export REFCOMP_CACHE_DIR=${REFCOMP_CACHE_DIR:-/tmp/refcomp-cache}
export PYTHONPATH="/tmp/refcomp-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

if ! python3 -c "import pycuda.driver" 2>/dev/null; then
  echo "== installing pycuda"
  if [ -n "$WHEELS" ] && ls "$WHEELS"/pycuda-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/refcomp-site "$WHEELS"/*.whl
  elif [ -n "$WHEELS" ]; then
    export CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
    python3 -m pip install -q --no-index --no-build-isolation --target /tmp/refcomp-site \
      --find-links "$WHEELS" "$WHEELS"/pycuda-*.tar.gz
  else
    python3 -m pip install -q --target /tmp/refcomp-site pycuda
  fi
fi

echo "== refcomp doctor"
python3 -m refcomp doctor

echo "== GPU tests"
# -o addopts="": the GPU machine may lack pytest-xdist, and one process owns the device anyway
timeout 420 python3 -m pytest -o addopts="" -m "not slow" -q -rs -p no:cacheprovider tests/test_gpu.py tests/test_exec_backends.py tests/test_measure.py \
  2>&1 | tee "$RESULTS/gpu_tests.log"
tests_status=${PIPESTATUS[0]}

echo "== GPU benchmark"
timeout 240 python3 bench/gpu_bench.py 2>&1 | tee "$RESULTS/gpu_bench.log"

echo "== GPT-2 small's decode step on the GPU (issue 30: modeled, measured, as one CUDA graph)"
timeout 180 python3 bench/decode_gpu_bench.py 2>&1 | tee "$RESULTS/decode_gpu.log"

echo "== GPT-2 block on the GPU"
timeout 120 python3 examples/gpt2_block.py --backend pycuda 2>&1 | tail -n 20

if [ -n "${OUT:-}" ]; then
  cp "$RESULTS"/gpu*.json "$RESULTS"/gpu_*.log "$RESULTS"/decode_gpu.* "$RESULTS"/launch.json "$OUT"/ 2>/dev/null
fi
echo "== summary"
tail -n 1 "$RESULTS/gpu_tests.log"
exit "$tests_status"
