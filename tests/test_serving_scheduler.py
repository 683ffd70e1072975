"""Continuous batching and the prefix cache: requests that arrive at different steps, are preempted
by a small pool, share a prompt prefix or are cancelled each get exactly the greedy tokens they get
alone (an independent NumPy GPT-2, tests/serving_oracle.py), and the pool is whole again after.

The scheduler and the cache are host logic (no graph of their own), so the property test below,
random arrivals, lengths, pool sizes and cancellations, is their fuzzer. The programs run on the
reference backend: the emulator's compiled programs are the engine's, tested in
test_serving_generate.py.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from refcomp.errors import RefcompError
from refcomp.serving.engine import Engine, EngineError
from refcomp.serving.scheduler import Scheduler
from serving_oracle import alone, prompt, tiny_model

LENGTHS = [3, 11, 1, 17, 6, 9, 2, 14]  # 8 requests, the 4th prefilled over three chunks
NEW = 10
EXAMPLES = int(os.environ.get("REFCOMP_SERVING_EXAMPLES", "12"))  # raise it for a deeper run


def engine(pages=64, page_size=4, chunk=8):
    return Engine(tiny_model(), pages=pages, page_size=page_size, backend="numpy", prefill_chunk=chunk)


def serve(scheduler, arrivals, new=NEW, cancels=()):
    """Add request i at step arrivals[i] (and cancel the ids `cancels` maps to a step); step until
    all are done. The requests by index."""
    requests, step = {}, 0
    while len(requests) < len(arrivals) or not scheduler.idle:
        for i, (p, at) in enumerate(arrivals):
            if at == step:
                requests[i] = scheduler.add(p, new, ignore_eos=True)
        for i, at in cancels:
            if at == step and i in requests:
                scheduler.cancel(requests[i].id)
        scheduler.step()
        step += 1
        assert step < 2000, "the scheduler made no progress"
    return requests


def pool_is_whole(scheduler):
    pool = scheduler.pool
    held = scheduler.cache.pages if scheduler.cache else 0
    assert pool.sequences() == [] and pool.free_pages + held == pool.num_pages
    if scheduler.cache:
        scheduler.cache.clear()
    assert pool.free_pages == pool.num_pages and pool._refs == {}


@pytest.mark.parametrize("pages", [64, 12], ids=["roomy", "preempting"])
def test_requests_arriving_at_different_steps_get_their_tokens_alone(pages):
    arrivals = [(prompt(n, i), 2 * i) for i, n in enumerate(LENGTHS)]
    scheduler = Scheduler(engine(pages), step_tokens=12)
    requests = serve(scheduler, arrivals)
    for i, (p, _) in enumerate(arrivals):
        assert requests[i].out == alone(tuple(p), NEW), f"request {i}"
        assert requests[i].finish_reason == "length"
    # requests really overlapped: far fewer steps than one request after the other
    assert scheduler.steps < sum(NEW + -(-n // 8) for n in LENGTHS)
    assert (scheduler.stats["preemptions"] > 0) == (pages == 12)
    pool_is_whole(scheduler)


def test_a_step_keeps_to_its_token_budget_and_mixes_prefill_with_decode():
    scheduler = Scheduler(engine(), step_tokens=6)
    first = scheduler.add(prompt(3), 4, ignore_eos=True)
    scheduler.step()  # first prefilled: its first token
    assert len(first.out) == 1
    second = scheduler.add(prompt(17, 1), 4, ignore_eos=True)
    before = dict(scheduler.stats)
    scheduler.step()  # one decode token for the first, a chunk of 5 of the second's prompt
    assert scheduler.stats["decode_tokens"] - before["decode_tokens"] == 1
    assert scheduler.stats["prefill_tokens"] - before["prefill_tokens"] == 5
    assert len(first.out) == 2 and second.cached == 5 and second.out == []
    scheduler.run()
    assert first.out == alone(tuple(prompt(3)), 4) and second.out == alone(tuple(prompt(17, 1)), 4)


def test_static_batching_the_baseline_waits_for_the_batch_to_end():
    scheduler = Scheduler(engine(), step_tokens=12, continuous=False)
    first = scheduler.add(prompt(3), 5, ignore_eos=True)
    scheduler.step()
    late = scheduler.add(prompt(4, 1), 2, ignore_eos=True)
    while first.state != "finished":
        scheduler.step()
        assert late.out == [] and late.state == "waiting"
    scheduler.run()
    assert first.out == alone(tuple(prompt(3)), 5) and late.out == alone(tuple(prompt(4, 1)), 2)
    pool_is_whole(scheduler)


def test_shared_prefixes_are_prefilled_once():
    system = prompt(16, 9)  # four pages of 4
    arrivals = [(system + prompt(n, i), 3 * i) for i, n in enumerate([2, 5, 3])]
    got = {}
    for cache in (False, True):
        scheduler = Scheduler(engine(), step_tokens=24, prefix_cache=cache)
        requests = serve(scheduler, arrivals, new=6)
        got[cache] = [requests[i].out for i in range(3)]
        if cache:
            stats = scheduler.cache.stats
            assert stats["hit_tokens"] == 2 * len(system)
            assert stats["prefilled_tokens"] == sum(len(p) for p, _ in arrivals) - 2 * len(system)
        else:
            assert scheduler.stats["prefill_tokens"] == sum(len(p) for p, _ in arrivals)
        pool_is_whole(scheduler)
    assert got[True] == got[False] == [alone(tuple(p), 6) for p, _ in arrivals]


def test_the_cache_evicts_least_recently_used_unshared_pages():
    scheduler = Scheduler(engine(pages=10), step_tokens=24, prefix_cache=True)
    a, b = prompt(9, 1), prompt(9, 2)  # two full pages each go to the cache
    for p in (a, b):
        scheduler.add(p, 1, ignore_eos=True)
        scheduler.run()
    assert scheduler.cache.pages == 4 and scheduler.pool.free_pages == 6
    scheduler.add(a, 1, ignore_eos=True)  # a is used again: b's pages are the older
    scheduler.run()
    assert scheduler.cache.stats["hit_tokens"] == 8
    c = scheduler.add(prompt(30, 3), 2, ignore_eos=True)  # 8 pages: b's two must go
    scheduler.run()
    assert c.out == alone(tuple(prompt(30, 3)), 2)
    assert scheduler.cache.stats["evicted_pages"] >= 2
    assert (len(scheduler.cache.match(a, 8)) > len(scheduler.cache.match(b, 8))
            or not scheduler.cache.match(b, 8))
    pool_is_whole(scheduler)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=st.lists(
        st.tuples(st.integers(1, 14), st.integers(0, 3), st.integers(0, 6), st.integers(1, 6),
                  st.one_of(st.none(), st.integers(0, 8))),
        min_size=1,
        max_size=6,
    ),
    pages=st.integers(6, 24),
    step_tokens=st.integers(1, 12),
    cache=st.booleans(),
)
def test_random_workloads_get_their_tokens_and_leak_no_page(workload, pages, step_tokens, cache):
    """(prompt length, variant, arrival step, new tokens, cancel step or None) per request; variants
    repeat prompts, so the cache shares pages between live requests."""
    scheduler = Scheduler(engine(pages), step_tokens=step_tokens, prefix_cache=cache)
    arrivals = [(prompt(n, v), at) for n, v, at, _, _ in workload]
    requests, step = {}, 0
    while len(requests) < len(workload) or not scheduler.idle:
        for i, (n, v, at, new, cancel) in enumerate(workload):
            if at == step:
                requests[i] = scheduler.add(arrivals[i][0], new, ignore_eos=True)
            if cancel is not None and i in requests and at + cancel == step:
                scheduler.cancel(requests[i].id)
        scheduler.step()
        step += 1
        assert step < 1000
    for i, (n, v, at, new, cancel) in enumerate(workload):
        want = alone(tuple(arrivals[i][0]), new)
        r = requests[i]
        if r.finish_reason == "cancelled":
            assert r.out == want[:len(r.out)]
        else:
            assert r.out == want and r.finish_reason == "length"
    pool_is_whole(scheduler)


def test_requests_the_pool_cannot_hold_are_refused():
    scheduler = Scheduler(engine(pages=4), step_tokens=8)
    with pytest.raises(EngineError, match="request 0: 14 prompt tokens and 4 new ones need 5 pages"):
        scheduler.add(prompt(14), 4)
    with pytest.raises(EngineError, match="cancel: no request 7"):
        scheduler.cancel(7)
    with pytest.raises(EngineError, match="step_tokens"):
        Scheduler(engine(), step_tokens=0)
    with pytest.raises(RefcompError, match="token ids"):
        scheduler.add([1, 999], 2)
    done = scheduler.add(prompt(3), 0)
    assert done.state == "finished" and done.out == [] and scheduler.idle


def test_the_compiled_programs_serve_the_scheduler_on_the_emulator():
    """The same mixed steps on the emulator's compiled programs (two compiles in all), with shared
    prefix pages in the block tables and a pool small enough to preempt."""
    emulated = Engine(tiny_model(), pages=7, page_size=4, backend="emulator", prefill_chunk=8)
    scheduler = Scheduler(emulated, step_tokens=10, prefix_cache=True)
    shared = prompt(8, 5)
    arrivals = [(p, 2 * i) for i, p in enumerate([prompt(3), shared + [1, 2, 3], prompt(6, 2), shared + [4]])]
    requests = serve(scheduler, arrivals, new=6)
    assert [requests[i].out for i in range(4)] == [alone(tuple(p), 6) for p, _ in arrivals]
    assert emulated.compiles == 2 and scheduler.cache.stats["hit_tokens"] > 0
    assert scheduler.stats["preemptions"] > 0
    pool_is_whole(scheduler)
