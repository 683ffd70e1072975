"""The JSON a benchmark writes beside its table: what ran, where, at which revision, under what load."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path


def write_results(path, script: str, load_start, elapsed_s: float, label: str | None = None,
                  **fields) -> None:
    """Write `fields` with the run's provenance to `path` (`load_start`: os.getloadavg() at the start).
    With a `label` the file keeps a run per label ({"runs": {label: ...}}), so a before and an after
    sit side by side; this run replaces only its own label's."""
    root = Path(__file__).resolve().parent.parent
    rev = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result = {"generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "command": " ".join([script, *sys.argv[1:]]),
              "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
              "load_average_at_start": load_start, "load_average_at_end": os.getloadavg(), "revision": rev,
              "elapsed_s": elapsed_s, **fields}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if label is not None:
        runs = json.loads(path.read_text()).get("runs", {}) if path.exists() else {}
        result = {"runs": {**runs, label: result}}
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {os.path.relpath(path)}")
