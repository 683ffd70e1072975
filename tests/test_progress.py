"""refcomp.progress decides who sees a compile's progress: a terminal or Jupyter yes, a pipe, CI or
pytest no, $REFCOMP_PROGRESS and enable() over both. The decision is tested on fake streams and
modules; one test gives a child process a pseudo-terminal as its stderr."""
from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
import types
from pathlib import Path

import pytest

import refcomp as rc
from refcomp import progress

REPO = Path(__file__).resolve().parent.parent


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _ipython(shell_class_name: str) -> types.ModuleType:
    """A stand-in for the IPython module whose get_ipython() returns a shell of that class name."""
    shell = type(shell_class_name, (), {})()
    subclass = type("ColabShell", (type(shell),), {})()  # Colab's shell subclasses the ZMQ one
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: subclass
    return module


def nobody_decided(monkeypatch) -> None:
    """No switch, no $REFCOMP_PROGRESS, not under pytest or CI as far as progress can tell (called in
    the test itself: pytest sets PYTEST_CURRENT_TEST again after the fixtures)."""
    for name in (progress.ENV, "PYTEST_CURRENT_TEST", "CI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(progress, "_switch", None)


@pytest.mark.parametrize("stream, environ, jupyter, want", [
    (Terminal(), {}, None, True),
    (io.StringIO(), {}, None, False),  # a pipe or a file
    (Terminal(), {"CI": "true"}, None, False),
    (Terminal(), {"CI": "false"}, None, True),
    (Terminal(), {"PYTEST_CURRENT_TEST": "tests/x.py::t (call)"}, None, False),
    (io.StringIO(), {}, "ZMQInteractiveShell", True),  # a Jupyter kernel: stderr is no terminal
    (io.StringIO(), {}, "TerminalInteractiveShell", False),  # IPython in a pipe
    (io.StringIO(), {"CI": "1"}, "ZMQInteractiveShell", False),  # a notebook run by CI (nbval, papermill)
])
def test_who_is_watching(stream, environ, jupyter, want):
    modules = {"IPython": _ipython(jupyter)} if jupyter else {}
    assert progress.watched(stream, environ, modules) is want


def test_jupyter_is_detected_without_importing_ipython():
    assert not progress.in_jupyter({})
    assert not progress.in_jupyter({"IPython": types.ModuleType("IPython")})  # imported, no get_ipython
    assert not progress.in_jupyter(
        {"IPython": types.SimpleNamespace(get_ipython=lambda: None)}
    )  # plain python
    assert progress.in_jupyter({"IPython": _ipython("ZMQInteractiveShell")})


@pytest.mark.parametrize(
    "value, want", [("", None), ("0", False), ("off", False), ("1", True), ("yes", True)]
)
def test_the_environment_variable(value, want):
    assert progress.env_setting({progress.ENV: value}) is want
    assert progress.env_setting({}) is None


def test_the_variable_overrides_the_terminal_and_enable_overrides_both(monkeypatch):
    nobody_decided(monkeypatch)
    assert progress.delay(Terminal()) == progress.WATCHED_DELAY_S == 2.0  # a library user on a terminal
    assert progress.delay(io.StringIO()) is None
    monkeypatch.setenv(progress.ENV, "0")
    assert progress.delay(Terminal()) is None
    monkeypatch.setenv(progress.ENV, "1")
    assert progress.delay(io.StringIO()) == progress.DELAY_S  # asked for: shown into a pipe too
    with progress.switched(False):
        assert progress.delay(Terminal()) is None
    monkeypatch.setenv(progress.ENV, "0")
    with progress.switched(True):
        assert progress.delay(io.StringIO()) == progress.DELAY_S


def _compile_something_new(tmp_path, monkeypatch):
    """rc.compile of a graph no cache holds, so the search and code generation both run."""
    monkeypatch.setenv("REFCOMP_PROGRAM_CACHE_DIR", str(tmp_path / "programs"))
    x = rc.input("x", (3, 7))
    rc.compile(x.exp() * (time.time_ns() % 997 + 0.5))


@pytest.mark.parametrize("stream, shown", [(Terminal(), True), (io.StringIO(), False)])
def test_a_library_compile_shows_progress_only_on_a_terminal(stream, shown, tmp_path, monkeypatch):
    nobody_decided(monkeypatch)
    monkeypatch.setattr(progress, "WATCHED_DELAY_S", 0.0)  # every stage counts as slow
    monkeypatch.setattr(sys, "stderr", stream)
    _compile_something_new(tmp_path, monkeypatch)
    text = stream.getvalue()
    assert (
        "refcomp: search ... done in " in text and "refcomp: code generation ... done in " in text
    ) is shown, text
    assert shown or text == ""


CHILD = '''
import time
import refcomp as rc
from refcomp import progress
progress.WATCHED_DELAY_S, progress.REFRESH_S = 0.2, 0.05
assert progress._switch is None
with progress.stage("g++ build") as shown:  # a slow stage: past the delay, redrawn while it runs
    shown.note("3 states")
    time.sleep(0.6)
progress.WATCHED_DELAY_S = 0.0
rc.compile(rc.input("x", (3, 7)).exp() * 1.25)  # a real compile's stages, every one counted as slow
'''


def test_a_slow_stage_on_a_pseudo_terminal_prints_progress(tmp_path):
    """A library process (no switch, no $REFCOMP_PROGRESS) whose stderr is a terminal, as a person has it."""
    env = {k: v for k, v in os.environ.items() if k not in (progress.ENV, "PYTEST_CURRENT_TEST", "CI")}
    env.update(PYTHONPATH=str(REPO), REFCOMP_PROGRAM_CACHE_DIR=str(tmp_path / "programs"))
    parent, child = pty.openpty()
    fcntl.ioctl(
        child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0)
    )  # a window's size (a bare pty has 0 columns)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=child,
            env=env,
            cwd=tmp_path,
        )
        os.close(child)
        child = None
        text = _read_until_closed(parent, deadline=time.monotonic() + 60)
        assert proc.wait(timeout=60) == 0, text
    finally:
        os.close(parent)
        if child is not None:
            os.close(child)
    assert "\rrefcomp: g++ build ... " in text and "(3 states)" in text  # the status line, redrawn in place
    summaries = [
        line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n")
    ]  # the terminal writes \r\n
    assert any(s.startswith("refcomp: g++ build ... done in 0.") for s in summaries), summaries
    assert any(s.startswith("refcomp: search ... done in ") for s in summaries), summaries


def _read_until_closed(fd: int, deadline: float) -> str:
    """Everything written to the pseudo-terminal until the child closes it (EIO on Linux)."""
    chunks = []
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 1.0)[0]:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")
