"""Progress on stderr for the slow stages of a compile: the search, code generation, g++ and nvcc.

Shown where a person is watching, quiet where nobody is. The rule, first match wins:

1. `refcomp.progress.enable(on)` (the command line switches it on for its own run);
2. $REFCOMP_PROGRESS: 0 (or false, no, off) keeps it quiet, any other value turns it on;
3. otherwise on when stderr is a terminal or the process is a Jupyter kernel, and off in a pipe
   or a file, under CI (CI=true) and under pytest, where nobody reads a status line.

A stage shows only once it has run for DELAY_S (WATCHED_DELAY_S when rule 3 chose: a library user
did not ask, so a compile must be slow enough to be worth a line), so a quick compile prints nothing:

* on a terminal or in Jupyter, a tqdm status line redrawn in place (elapsed time and what the
  stage reports, e.g. the search's states and best cost), replaced by one summary line at the end;
* into a pipe or a file, one line when the stage ends (`refcomp: search ... done in 3.2 s (...)`),
  never a carriage-return update.

search/ and exec/ call `stage()`, so this module is the lowest layer and imports nothing of
refcomp; tqdm is imported only when a status line is actually drawn.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, Optional

DELAY_S = 1.0  # a stage shorter than this prints nothing
WATCHED_DELAY_S = 2.0  # the same when nobody switched progress on (rule 3 of the module docstring)
REFRESH_S = 0.2  # how often a terminal status line is redrawn (the elapsed time moves during a g++ build)
ENV = "REFCOMP_PROGRESS"
_OFF = ("0", "false", "no", "off")

_switch: Optional[bool] = None  # None: $REFCOMP_PROGRESS decides, else whether someone is watching


def enable(on: bool = True) -> None:
    """Switch progress reporting on (or off) for this process, whatever $REFCOMP_PROGRESS says."""
    global _switch
    _switch = bool(on)


def env_setting(environ: Mapping[str, str] = os.environ) -> Optional[bool]:
    """What $REFCOMP_PROGRESS asks for: True, False, or None when it is unset or empty."""
    value = environ.get(ENV, "").strip().lower()
    return None if not value else value not in _OFF


def in_jupyter(modules: Mapping[str, object] = sys.modules) -> bool:
    """True inside a Jupyter kernel (IPython's ZMQ shell, or a subclass such as Colab's), where
    stderr is no terminal but a person reads it. IPython is looked up, never imported."""
    ipython = modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if callable(get_ipython) else None
    return shell is not None and any(c.__name__ == "ZMQInteractiveShell" for c in type(shell).__mro__)


def watched(
    stream, environ: Mapping[str, str] = os.environ, modules: Mapping[str, object] = sys.modules
) -> bool:
    """Whether a person reads `stream` as it is written: a terminal or Jupyter, not CI or pytest
    (both of which may hand a child process a terminal that nobody watches)."""
    if environ.get("CI", "").strip().lower() not in ("",) + _OFF or "PYTEST_CURRENT_TEST" in environ:
        return False
    return _isatty(stream) or in_jupyter(modules)


def delay(stream=None) -> Optional[float]:
    """How long a stage runs before it shows (seconds), or None when progress is off (the rule
    in the module docstring)."""
    chosen = _switch if _switch is not None else env_setting()
    if chosen is not None:
        return DELAY_S if chosen else None
    return WATCHED_DELAY_S if watched(sys.stderr if stream is None else stream) else None


def enabled() -> bool:
    return delay() is not None


@contextmanager
def switched(on: bool) -> Iterator[None]:
    """Progress on (or off) inside the block, restored after: the command line's switch, which
    must not outlive `main()` when tests call it in-process."""
    global _switch
    before = _switch
    _switch = bool(on)
    try:
        yield
    finally:
        _switch = before


class _Quiet:
    def note(self, text: str) -> None:
        pass


class Stage:
    """One stage under way; `note(text)` says where it stands (shown after the elapsed time)."""

    def __init__(self, name: str, stream, delay_s: Optional[float] = None):
        self.name, self._stream = name, stream
        self._delay = DELAY_S if delay_s is None else delay_s
        self._start = time.perf_counter()
        self._text = ""
        self._bar = None
        self._done = threading.Event()
        self._thread = None
        if _isatty(stream) or in_jupyter():  # Jupyter draws a carriage return in place too
            self._thread = threading.Thread(target=self._draw, name=f"refcomp-progress-{name}", daemon=True)
            self._thread.start()

    def note(self, text: str) -> None:
        self._text = text  # the drawing thread picks it up at its next refresh

    def _draw(self) -> None:
        """Terminal or Jupyter only: wait for the delay, then keep a status line fresh until the stage ends. A
        thread, because a g++ build blocks the caller and its elapsed time should still move."""
        if self._done.wait(self._delay):
            return
        from tqdm import tqdm  # the terminal's width, redrawing in place, clearing the line at the end
        self._bar = tqdm(file=self._stream, bar_format="{desc}", leave=False, dynamic_ncols=True)
        while True:
            self._bar.set_description_str(self._status(""))
            if self._done.wait(REFRESH_S):
                return

    def _status(self, outcome: str) -> str:
        detail = f" ({self._text})" if self._text else ""
        return f"refcomp: {self.name} ... {outcome}{time.perf_counter() - self._start:.1f} s{detail}"

    def finish(self, outcome: str) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()  # the bar is the thread's until it returns
        if self._bar is not None:
            self._bar.close()  # leave=False: the status line is cleared, the summary below replaces it
        if time.perf_counter() - self._start >= self._delay:
            print(self._status(outcome), file=self._stream, flush=True)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


@contextmanager
def stage(name: str, enabled_here: bool = True):
    """Report the block as stage `name` (when progress is on and `enabled_here`); yields an object
    with `note(text)`."""
    wait = delay() if enabled_here else None
    if wait is None:
        yield _Quiet()
        return
    current = Stage(name, sys.stderr, wait)
    outcome = "failed after "
    try:
        yield current
        outcome = "done in "
    except KeyboardInterrupt:
        outcome = "stopped after "
        raise
    finally:
        current.finish(outcome)
