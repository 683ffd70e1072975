"""A pytest plugin that charges each test the CPU time it used, its own and its g++ children's.

Wall time under xdist and a loaded machine says little about which test costs what; CPU seconds
and the number of emulator libraries a test built do. Loaded by `bench/suite_bench.py --by-test`
(or `pytest -p suite_cpu_plugin` with bench/ on PYTHONPATH); each worker appends one JSON line
per test to `$REFCOMP_SUITE_CPU_DIR/<worker>.jsonl`.
"""
from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest

OUT_ENV = "REFCOMP_SUITE_CPU_DIR"
_failed: set[str] = set()  # tests with a failed phase (setup, call or teardown)


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _builds() -> int:
    try:
        from refcomp.exec import emu_build
    except ImportError:
        return 0
    return emu_build.gxx_invocations() + emu_build.pch_builds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = os.environ.get(OUT_ENV)
    own, children, builds = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), _builds()
    yield
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        own, children = _cpu(resource.RUSAGE_SELF) - own, _cpu(resource.RUSAGE_CHILDREN) - children
        row = {"test": item.nodeid, "cpu_s": round(own + children, 3), "children_cpu_s": round(children, 3),
               "builds": _builds() - builds, "failed": item.nodeid in _failed}
        with Path(folder, f"{worker}.jsonl").open("a") as out:
            out.write(json.dumps(row) + "\n")


def pytest_runtest_logreport(report):
    if report.failed:
        _failed.add(report.nodeid)
