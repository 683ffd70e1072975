"""Progress on stderr for the slow stages of a compile: the search, code generation, g++ and nvcc.

Off unless switched on, so a library user sees nothing unexpected: `refcomp.progress.enable()` or
REFCOMP_PROGRESS=1 turns it on (the command line turns it on itself; REFCOMP_PROGRESS=0 keeps it
quiet there too). A stage shows only once it has run for DELAY_S, so a quick compile prints nothing:

* on a terminal, a tqdm status line redrawn in place (elapsed time and what the stage reports,
  e.g. the search's states and best cost), replaced by one summary line when the stage ends;
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
from typing import Iterator, Optional

DELAY_S = 1.0  # a stage shorter than this prints nothing
REFRESH_S = 0.2  # how often a terminal status line is redrawn (the elapsed time moves during a g++ build)
ENV = "REFCOMP_PROGRESS"

_switch: Optional[bool] = None  # None: follow $REFCOMP_PROGRESS


def enable(on: bool = True) -> None:
    """Switch progress reporting on (or off) for this process, whatever $REFCOMP_PROGRESS says."""
    global _switch
    _switch = bool(on)


def enabled() -> bool:
    return _switch if _switch is not None else os.environ.get(ENV, "") not in ("", "0")


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

    def __init__(self, name: str, stream):
        self.name, self._stream = name, stream
        self._start = time.perf_counter()
        self._text = ""
        self._bar = None
        self._done = threading.Event()
        self._thread = None
        if _isatty(stream):
            self._thread = threading.Thread(target=self._draw, name=f"refcomp-progress-{name}", daemon=True)
            self._thread.start()

    def note(self, text: str) -> None:
        self._text = text  # the drawing thread picks it up at its next refresh

    def _draw(self) -> None:
        """Terminal only: wait DELAY_S, then keep a status line fresh until the stage ends. A
        thread, because a g++ build blocks the caller and its elapsed time should still move."""
        if self._done.wait(DELAY_S):
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
        if time.perf_counter() - self._start >= DELAY_S:
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
    if not (enabled_here and enabled()):
        yield _Quiet()
        return
    current = Stage(name, sys.stderr)
    outcome = "failed after "
    try:
        yield current
        outcome = "done in "
    except KeyboardInterrupt:
        outcome = "stopped after "
        raise
    finally:
        current.finish(outcome)
