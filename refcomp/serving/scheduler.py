"""Continuous batching: requests join and leave the running batch at every step.

`Engine.generate` serves one fixed batch from its first prefill to its last token. A `Scheduler`
instead keeps a queue of requests that grows and shrinks while it runs: every `step()` gives each
request, oldest first, as many tokens as the step's budget (`step_tokens`) has left: one for a
request that is decoding, a chunk of at most `prefill_chunk` for one that is prefilling (chunked
prefill), so a long prompt never holds up the decodes of the others for more than a chunk.

A step runs the engine's two compiled programs one after the other, not one mixed program: the
decode program for the rows that feed one token, then the prefill program for the chunks (in groups
whose padding the scratch pages hold). A mixed program would pad every decode row to the chunk's
width; two launches keep both programs as they are and compile nothing new.

Memory. A request takes pages as its tokens need them. When the pool is short, the prefix cache
gives back unshared pages first (least recently used), then the youngest running request is
preempted: its pages are freed and it is queued again, to be recomputed later (its prompt and the
tokens it already produced are prefilled afresh). The oldest request can always take the whole
pool, since `add` refuses a request that does not fit alone, so some request finishes every few
steps and no set of requests waits on another: there is no deadlock. Requests are served in
arrival order: a preempted request goes back before every request that arrived after it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .engine import Engine, EngineError, SequenceState
from .prefix_cache import PrefixCache
from .programs import MAX_BATCH


@dataclass
class Request(SequenceState):
    """One request: its tokens so far (prompt, then output), what the pool holds of them (`cached`),
    and how it ended (`finish_reason`: "stop", "length" or "cancelled")."""
    state: str = "waiting"  # waiting, running, finished
    finish_reason: Optional[str] = None
    cached_pages: int = 0  # full pages given to the prefix cache so far
    arrived_step: int = 0
    first_token_step: Optional[int] = None

    @property
    def key(self) -> tuple:
        return ("scheduler", self.index)

    @property
    def id(self) -> int:
        return self.index


class Scheduler:
    """Serve requests on `engine` (its pool and its compiled programs) by continuous batching;
    `prefix_cache=True` shares the pages of common prompt prefixes across requests."""

    def __init__(self, engine: Engine, step_tokens: Optional[int] = None, prefix_cache: bool = False,
                 continuous: bool = True):
        if not isinstance(engine, Engine):
            raise EngineError(f"Scheduler: engine must be a serving.Engine, got {type(engine).__name__}")
        step_tokens = engine.prefill_chunk if step_tokens is None else step_tokens
        if isinstance(step_tokens, bool) or not isinstance(step_tokens, int) or step_tokens < 1:
            raise EngineError(f"Scheduler: step_tokens must be an int >= 1, got {step_tokens!r}")
        self.engine, self.pool, self.step_tokens = engine, engine.pool, step_tokens
        self.cache = PrefixCache(self.pool) if prefix_cache else None
        self.continuous = continuous  # False: static batching, the baseline (see `step`)
        self._batch: set = set()  # static batching: the requests of the batch being served
        self.waiting: list = []  # both in arrival order
        self.running: list = []
        self.requests: dict = {}
        self._ids = itertools.count()
        self.steps = 0
        self._preempted: set = set()
        self.runs = None  # a list to record (program, rows, chunk width, block-table width) of each run into
        self.stats = {"prefill_tokens": 0, "decode_tokens": 0, "preemptions": 0, "tokens": 0,
                      "largest_step": 0}  # the most requests one step has run

    # --- requests ----------------------------------------------------------------------------------
    def add(self, prompt: Sequence[int], max_new_tokens: int = 32, sampling=None,
            stop_token_ids: Sequence[int] = (), ignore_eos: bool = False) -> Request:
        """Queue a request; it joins the running batch at the next step that has room for it."""
        (seq,) = self.engine.new_sequences([prompt], max_new_tokens, sampling, stop_token_ids, ignore_eos)
        index = next(self._ids)
        need = -(-(seq.prompt_len + max_new_tokens) // self.pool.page_size)
        if need > self.pool.num_pages:
            raise EngineError(
                f"request {index}: {seq.prompt_len} prompt tokens and {max_new_tokens} new ones need {need} "
                f"pages, more than the pool's {self.pool.num_pages}"
            )
        fields = {f: getattr(seq, f) for f in ("tokens", "prompt_len", "sampling", "stops", "limit", "seen")}
        request = Request(index, **fields, arrived_step=self.steps)
        self.requests[index] = request
        if max_new_tokens == 0:
            self._finish(request, "length")
        else:
            self.waiting.append(request)
        return request

    def cancel(self, request_id: int) -> None:
        """Stop a request now: its pages are freed, its tokens so far stay in `requests`."""
        request = self.requests.get(request_id)
        if request is None:
            raise EngineError(f"cancel: no request {request_id!r}")
        if request.state != "finished":
            self._finish(request, "cancelled")

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def run(self) -> dict:
        """Step until every request has finished; each request's new tokens by id."""
        while not self.idle:
            self.step()
        return {i: r.out for i, r in self.requests.items()}

    # --- one step ----------------------------------------------------------------------------------
    def step(self) -> list:
        """Plan and run one step; the (request, token) pairs it produced, in row order. Without
        `continuous`, a request starts only with the batch of those waiting when the last batch ended."""
        plan, budget, held, self._preempted = [], self.step_tokens, set(), set()
        if not self.continuous and not self.running and not self._batch & {q.index for q in self.waiting}:
            self._batch = {q.index for q in self.waiting}
        for q in sorted(self.running + self.waiting, key=lambda r: r.index):
            if budget == 0 or len(plan) == MAX_BATCH:
                break
            if q.index in self._preempted or (q.state == "waiting" and not self.continuous
                                              and q.index not in self._batch):
                continue  # it waits for a later step (or batch)
            hit = self._start(q) if q.state == "waiting" else 0
            n = min(len(q.tokens) - q.cached, budget, self.engine.prefill_chunk)
            if not self._room(q, n, held):
                if q.state == "waiting":
                    self._drop_pages(q)
                break  # nobody younger overtakes it
            if q.state == "waiting":
                self.waiting.remove(q)
                self.running.append(q)
                self.running.sort(key=lambda r: r.index)
                q.state = "running"
                if self.cache is not None:
                    self.cache.stats["hit_tokens"] += hit
            self.pool.allocate(q.key, n)
            plan.append((q, n))
            held.add(q.index)
            budget -= n
        self.stats["largest_step"] = max(self.stats["largest_step"], len(plan))
        for q, n in plan:
            kind = "decode_tokens" if q.out and n == len(q.tokens) - q.cached == 1 else "prefill_tokens"
            self.stats[kind] += n
        if self.cache is not None:
            self.cache.stats["prefilled_tokens"] = self.stats["prefill_tokens"]
        chosen = self._run(plan)
        self.steps += 1
        events = []
        for q, token in chosen:
            events.append((q, token))
            self._emit(q, token)
        return events

    def _start(self, q: Request) -> int:
        """Adopt the longest cached prefix of a waiting request's tokens (all but the last, whose
        logits the step needs); the tokens adopted."""
        if self.cache is None:
            return 0
        pages = self.cache.match(q.tokens, len(q.tokens) - 1)
        if pages:
            self.pool.adopt(q.key, pages)
            q.cached = len(pages) * self.pool.page_size
        return q.cached

    def _room(self, q: Request, n: int, held: set) -> bool:
        """Free pages for n more tokens of q: unshared cached pages first, then preempt the youngest
        running requests that arrived after q and are not in this step. False if that is not enough."""
        need = self.pool.pages_for(q.key, n)
        while self.pool.free_pages < need:
            if self.cache is not None and self.cache.evict(need - self.pool.free_pages):
                continue
            victims = [r for r in self.running if r.index > q.index and r.index not in held]
            if not victims:
                return False
            self._preempt(victims[-1])
        return True

    def _preempt(self, q: Request) -> None:
        self._drop_pages(q)
        self.running.remove(q)
        q.state = "waiting"
        self.waiting.append(q)
        self.waiting.sort(key=lambda r: r.index)
        self._preempted.add(q.index)
        self.stats["preemptions"] += 1

    def _drop_pages(self, q: Request) -> None:
        """Free q's pages (its full ones go to the prefix cache first) and forget what it cached."""
        if q.key in self.pool.sequences():
            self._share(q)
            self.pool.free(q.key)
        q.cached, q.cached_pages = 0, 0

    def _share(self, q: Request) -> None:
        """Give q's newly filled pages to the prefix cache."""
        full = q.cached // self.pool.page_size
        if self.cache is not None and full > q.cached_pages:
            self.cache.insert(q.tokens[:full * self.pool.page_size], self.pool.pages(q.key))
            q.cached_pages = full

    def _emit(self, q: Request, token: int) -> None:
        q.out.append(token)
        q.tokens.append(token)
        q.seen[token] = 1.0
        self.stats["tokens"] += 1
        if q.first_token_step is None:
            q.first_token_step = self.steps
        if token in q.stops:
            self._finish(q, "stop")
        elif len(q.out) >= q.limit:
            self._finish(q, "length")

    def _finish(self, q: Request, reason: str) -> None:
        self._drop_pages(q)
        for queue in (self.waiting, self.running):
            if q in queue:
                queue.remove(q)
        q.state, q.finish_reason = "finished", reason

    # --- running the programs ----------------------------------------------------------------------
    def _run(self, plan: list) -> list:
        """Run the step's rows: one-token rows by the decode program, chunks by the prefill program
        in groups whose padding fits the scratch pages. The (request, token) of rows that reached
        the end of their tokens (the others' logits are mid-prompt and dropped)."""
        singles = [(q, n) for q, n in plan if n == 1]
        chunks = sorted([(q, n) for q, n in plan if n > 1], key=lambda row: -row[1])
        groups, room = [], self.pool.scratch_pages * self.pool.page_size
        for row in chunks:
            group = groups[-1] if groups else None
            if group is None or sum(group[0][1] - n for _, n in group + [row]) > room:
                groups.append([row])
            else:
                group.append(row)
        chosen = []
        for kind, rows in [("decode", singles)] * bool(singles) + [("prefill", g) for g in groups]:
            seqs = [q for q, _ in rows]
            counts = [n for _, n in rows]
            feeds = self._feeds(rows)
            if self.runs is not None:
                self.runs.append((kind, len(rows), feeds["ids"].shape[1], feeds["block_table"].shape[1]))
            out = self.engine.choose(seqs, self.engine.program(kind)(feeds), self.steps)
            self.engine.store(seqs, counts, out)
            for q, token in zip(seqs, out["token"]):
                self._share(q)
                if q.cached == len(q.tokens):
                    chosen.append((q, int(token)))
        return chosen

    def _feeds(self, rows: list) -> dict:
        width = max(n for _, n in rows)
        ids = np.zeros((len(rows), width), np.int32)
        positions = np.zeros((len(rows), width), np.int32)
        for b, (q, n) in enumerate(rows):
            ids[b, :n] = q.tokens[q.cached:q.cached + n]
            positions[b, :n] = np.arange(q.cached, q.cached + n)
        seqs = [q for q, _ in rows]
        keys, starts, counts = [q.key for q in seqs], [q.cached for q in seqs], [n for _, n in rows]
        feeds = {
            "ids": ids,
            "positions": positions,
            "cached": np.array(starts, np.float32),
            "lengths": np.array(starts, np.float32) + counts,
            "block_table": self.pool.block_tables(keys),
            "slots": self.pool.slot_matrix(keys, starts, counts, width),
            "penalty": np.array([q.sampling.repetition_penalty for q in seqs], np.float32),
            "seen": np.stack([q.seen for q in seqs]),
        }
        if width > 1:
            feeds["last"] = (np.arange(len(rows)) * width + np.array(counts) - 1).astype(np.int32)
        return feeds
