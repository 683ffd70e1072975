"""A Scheduler on a thread of its own, for a server whose requests come and go while steps run.

Only the worker thread touches the scheduler: callers hand it requests and cancellations through an
inbox (under a lock, never held across a step), and it reports each token to the request's listener
as soon as the step that chose it ends. So a step that takes seconds (the emulator's) never blocks
the caller's event loop, and a request submitted meanwhile joins at the next step. If a step fails,
every live request is told so and dropped, and the worker carries on with the next ones.
"""
from __future__ import annotations

import itertools
import threading
from typing import Callable, Optional

from ..errors import RefcompError
from .scheduler import Scheduler

# listener(token or None, finish reason or None, error message or None)
Listener = Callable[[Optional[int], Optional[str], Optional[str]], None]


class Worker:
    """Runs `scheduler`'s steps while it has requests; `submit` and `cancel` may be called from any
    thread."""

    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler
        self._cond = threading.Condition()
        self._inbox: list = []
        self._cancels: list = []
        self._handles = itertools.count()
        self._requests: dict = {}  # handle -> the scheduler's request id
        self._listeners: dict = {}  # the scheduler's request id -> (handle, listener)
        self._stopping = False
        self.failures = 0
        self._thread = threading.Thread(target=self._loop, name="refcomp-serving-worker", daemon=True)
        self._thread.start()

    def submit(self, prompt, max_new_tokens: int, listener: Listener, **settings) -> int:
        """Queue a request (Scheduler.add's arguments); its handle, for `cancel`."""
        handle = next(self._handles)
        with self._cond:
            self._inbox.append((handle, prompt, max_new_tokens, settings, listener))
            self._cond.notify()
        return handle

    def cancel(self, handle: int) -> None:
        with self._cond:
            self._cancels.append(handle)
            self._cond.notify()

    def close(self, timeout: float = 30.0) -> None:
        """Stop after the step in progress (requests still running are dropped)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    def _loop(self) -> None:
        scheduler = self.scheduler
        while True:
            with self._cond:
                while not (self._inbox or self._cancels or self._stopping) and scheduler.idle:
                    self._cond.wait()
                if self._stopping:
                    return
                inbox, self._inbox = self._inbox, []
                cancels, self._cancels = self._cancels, []
            for handle, prompt, new, settings, listener in inbox:
                self._add(handle, prompt, new, settings, listener)
            for handle in cancels:
                rid = self._requests.pop(handle, None)
                if rid in self._listeners:
                    del self._listeners[rid]
                    scheduler.cancel(rid)
            if scheduler.idle:
                continue
            try:
                events = scheduler.step()
            except Exception as e:  # a bug or a backend failure: fail the live requests, not the server
                self._fail(f"{type(e).__name__}: {e}")
                continue
            for q, token in events:
                handle, listener = self._listeners.get(q.id, (None, None))
                if listener is None:
                    continue
                finished = q.state == "finished"
                if finished:
                    del self._listeners[q.id]
                    self._requests.pop(handle, None)
                listener(token, q.finish_reason if finished else None, None)

    def _add(self, handle, prompt, new, settings, listener) -> None:
        try:
            request = self.scheduler.add(prompt, new, **settings)
        except RefcompError as e:
            listener(None, None, str(e))
            return
        if request.state == "finished":  # max_new_tokens 0
            listener(None, request.finish_reason, None)
            return
        self._requests[handle] = request.id
        self._listeners[request.id] = (handle, listener)

    def _fail(self, message: str) -> None:
        self.failures += 1
        for rid, (handle, listener) in list(self._listeners.items()):
            self.scheduler.cancel(rid)
            self._requests.pop(handle, None)
            listener(None, None, message)
        self._listeners.clear()
