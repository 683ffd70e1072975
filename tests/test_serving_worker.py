"""The Worker (serving/worker.py): the scheduler on a thread of its own, fed from other threads.
Tokens arrive at each request's listener as they are chosen and equal the tokens alone
(tests/serving_oracle.py); a bad request and a failing step are reported to the listeners they
concern, and the worker goes on serving; a cancelled request frees its pages."""
from __future__ import annotations

import queue
import time

from refcomp.serving.engine import Engine
from refcomp.serving.scheduler import Scheduler
from refcomp.serving.worker import Worker
from serving_oracle import alone, prompt, tiny_model


def listen():
    events = queue.Queue()
    return events, lambda token, finish, error: events.put((token, finish, error))


def collect(events, timeout=30):
    """(tokens, finish reason, error) of one request, read until it ends."""
    tokens = []
    while True:
        token, finish, error = events.get(timeout=timeout)
        if token is not None:
            tokens.append(token)
        if finish is not None or error is not None:
            return tokens, finish, error


def test_the_worker_serves_cancels_and_survives_a_failing_step():
    scheduler = Scheduler(Engine(tiny_model(), pages=32, page_size=4, backend="numpy", prefill_chunk=8),
                          step_tokens=12)
    worker = Worker(scheduler)
    try:
        streams = []
        for i, n in enumerate([3, 9, 5]):
            events, listener = listen()
            worker.submit(prompt(n, i), 6, listener, ignore_eos=True)
            streams.append((prompt(n, i), events))
        for p, events in streams:
            assert collect(events) == (alone(tuple(p), 6), "length", None)

        events, listener = listen()
        worker.submit([1, 999], 2, listener)  # out of the vocabulary: the engine's own error, to this request
        tokens, finish, error = collect(events)
        assert tokens == [] and "token ids in [0, 64)" in error

        events, listener = listen()
        handle = worker.submit(prompt(4), 80, listener, ignore_eos=True)
        assert events.get(timeout=30)[0] is not None  # running
        worker.cancel(handle)
        deadline = time.monotonic() + 30
        while not [r for r in list(scheduler.requests.values()) if r.finish_reason == "cancelled"]:
            assert time.monotonic() < deadline, "the cancelled request kept running"
            time.sleep(0.01)
        cancelled = [r for r in scheduler.requests.values() if r.finish_reason == "cancelled"]
        assert len(cancelled) == 1 and len(cancelled[0].out) < 80

        real_step = scheduler.step
        scheduler.step = lambda: (_ for _ in ()).throw(RuntimeError("the device fell over"))
        events, listener = listen()
        worker.submit(prompt(3), 4, listener)
        assert collect(events) == ([], None, "RuntimeError: the device fell over")
        scheduler.step = real_step
        events, listener = listen()
        worker.submit(prompt(5, 2), 3, listener, ignore_eos=True)
        assert collect(events) == (alone(tuple(prompt(5, 2)), 3), "length", None)
        assert worker.failures == 1 and scheduler.pool.sequences() == []
        assert scheduler.pool.free_pages == scheduler.pool.num_pages
    finally:
        worker.close()
    assert not worker._thread.is_alive()
