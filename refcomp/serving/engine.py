"""`rc.serving.Engine`: generate tokens with two compiled programs over a paged KV cache.

The engine owns a PagedKVPool and compiles, on first use, a prefill program (a chunk of prompt
tokens per sequence) and a decode program (one token per sequence); both have symbolic batch, chunk
and block-table width, so a whole generation, however long the sequences grow, compiles exactly
twice (`engine.compiles`). Each step feeds the tokens, their positions, each sequence's cached
length, block table and slots, and the sampling settings, and reads back the next tokens. A
prompt longer than `prefill_chunk` is prefilled in several chunks, each attending to the cache the
previous ones wrote. Finished sequences (EOS, a stop token, max_new_tokens) leave the batch and
free their pages.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import numpy as np

from ..errors import RefcompError
from ..exec.backends import BACKENDS
from ..exec.resident import OnDevice, Resident
from ..ops.core import input as rc_input
from .kv_cache import PagedKVPool
from .models import Decoder
from .programs import MAX_BATCH, step_graph
from .sampling import Sampling, candidates_for, greedy_graph, sampling_feeds, sampling_graph


class EngineError(RefcompError):
    """A generate call the engine cannot serve (names the prompt or the setting)."""


@dataclass
class SequenceState:
    """A prompt being generated: its tokens so far, what the pool holds of them (`cached`), and
    its settings (the scheduler's requests extend it)."""
    index: int
    tokens: list
    prompt_len: int
    sampling: Sampling
    stops: frozenset
    limit: int
    seen: np.ndarray
    cached: int = 0
    out: list = field(default_factory=list)
    done: bool = False

    @property
    def key(self) -> tuple:
        """The sequence's id in the pool (the pool may hold others' sequences too)."""
        return ("engine", self.index)


class Engine:
    """Generate with `model` (serving.models.from_transformers) on `backend` ("numpy" is the
    reference; None is the default: a GPU if PyCUDA finds one, else the emulator). With `mesh`, the
    step programs are tensor parallel (serving/parallel.py): backend "mpi" runs one process per
    device, each on `device_backend`; another backend runs a simulated mesh."""

    def __init__(self, model: Decoder, pages: int = 256, page_size: int = 16, backend: Optional[str] = None,
                 prefill_chunk: int = 512, mesh=None, device_backend: str = "emulator"):
        if not isinstance(model, Decoder):
            raise EngineError(
                f"Engine: model must come from serving.models.from_transformers, got {type(model).__name__}"
            )
        s = model.spec
        self.model, self.backend, self.prefill_chunk = model, backend, int(prefill_chunk)
        # tensor parallel (serving/parallel.py): the step programs compiled on `mesh`; backend "mpi" runs
        # one process per device, each stage on device_backend; another backend, a simulated mesh
        self.mesh, self.device_backend = mesh, device_backend
        for what, value in (("prefill_chunk", prefill_chunk), ("pages", pages), ("page_size", page_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise EngineError(f"Engine: {what} must be an int >= 1, got {value!r}")
        known = BACKENDS + (("mpi",) if mesh is not None else ())
        if backend is not None and backend not in known:
            raise EngineError(f"Engine: unknown backend {backend!r}: choose one of {known} (or None)")
        # scratch pages take the padding of a batched prefill chunk (one chunk's worth; bigger
        # batches are prefilled in groups that fit)
        self.pool = PagedKVPool(pages, page_size, s.layers, s.kv_heads, s.head_dim,
                                scratch_pages=-(-self.prefill_chunk // page_size))
        self.candidates = candidates_for(s.vocab)
        self.compiles = 0
        self._programs = {}
        self._resident = None  # the weights and the pool on the device, from the first compiled step
        self.stats = {"prefill_s": 0.0, "decode_s": 0.0, "decode_steps": 0, "tokens": 0}
        self.trace = None  # a list to record (kind, prompt indices, logits) of every step into

    # --- programs ----------------------------------------------------------------------------------
    def program(self, kind: str):
        """The "prefill" or "decode" step, or the "sampler", as a function of its feeds, built (and
        compiled) once."""
        if kind not in self._programs:
            if kind == "sampler":
                outputs = {"token": sampling_graph(rc_input("logits", ("B", self.model.spec.vocab)))["token"]}
            else:
                outputs = step_graph(self.model, self.pool, 1 if kind == "decode" else "C", greedy_graph)
            hint = {"decode": {"B": 4, "NP": 8}, "prefill": {"B": 4, "C": 32, "NP": 8},
                    "sampler": {"B": 4}}[kind]
            if self.mesh is not None and kind != "sampler":
                from .parallel import mesh_step
                run, self._programs[kind + ".program"] = mesh_step(
                    outputs, self.model, self.mesh, hint, self.backend, self.device_backend)
                self._programs[kind] = lambda feeds: run(self._with_host_arrays(feeds))
                self.compiles += 1
            elif self.backend == "numpy" or (self.mesh is not None and self.device_backend == "numpy"):
                from ..reference.reference import evaluate
                step = kind != "sampler"
                self._programs[kind] = lambda feeds: evaluate(
                    outputs, self._with_host_arrays(feeds) if step else feeds)
            else:
                from ..compiler import compile as rc_compile

                program = rc_compile(outputs, dims_hint=hint)
                self.compiles += 1
                device = self.device_backend if self.mesh is not None else self.backend
                self._programs[kind] = lambda feeds, p=program: p.run(
                    feeds, backend=device, resident=self.resident(device))
                self._programs[kind + ".program"] = program
        return self._programs[kind]

    def _with_host_arrays(self, feeds: dict) -> dict:
        """A step's feeds with the weights and the pool as host arrays (the reference and the mesh)."""
        return {**self.model.feeds(), **self.pool.feeds(), **feeds}

    def resident(self, backend: Optional[str] = None) -> Resident:
        """The weights and the KV pool, uploaded to the device at the first compiled step and kept
        there (exec/resident.py): a step then sends only its tokens, positions, tables and settings,
        and its kernels write the new keys and values into the pool where it lies. The pool's host
        arrays are stale from then on; `sync_pool` reads the device's back into them."""
        if self._resident is None:
            self._resident = Resident({**self.model.feeds(), **self.pool.feeds()}, backend)
        return self._resident

    def sync_pool(self) -> None:
        """Copy the device's pool into the pool's host arrays (after compiled steps wrote it there)."""
        if self._resident is not None:
            for layer in range(self.pool.n_layers):
                name = self.pool.input_name(layer, "kv")
                self.pool.store(layer, kv=self._resident.get(name))

    def compiled(self, kind: str):
        """The compiled Program of "prefill", "decode" or "sampler" (compiled now if it was not yet;
        None on the numpy backend, which compiles nothing): for its cost model's figures."""
        self.program(kind)
        return self._programs.get(kind + ".program")

    # --- generation --------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 32, sampling=None,
                 stop_token_ids: Sequence[int] = (), ignore_eos: bool = False) -> list:
        """The new token ids of each prompt (a list per prompt), ending with the EOS or stop token
        that finished it, if one did."""
        out = [[] for _ in prompts]
        for i, token in self.stream(prompts, max_new_tokens, sampling, stop_token_ids, ignore_eos):
            out[i].append(token)
        return out

    def stream(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 32, sampling=None,
               stop_token_ids: Sequence[int] = (), ignore_eos: bool = False) -> Iterator[tuple]:
        """(prompt index, token id) as each token is chosen, step by step."""
        seqs = self.new_sequences(prompts, max_new_tokens, sampling, stop_token_ids, ignore_eos)
        try:
            live = [q for q in seqs if not q.done]
            step = 0
            while any(q.cached < q.prompt_len for q in live):
                started = time.perf_counter()
                chosen = self._prefill([q for q in live if q.cached < q.prompt_len], step)
                self.stats["prefill_s"] += time.perf_counter() - started
                step += 1
                for q, token in chosen:
                    yield from self._emit(q, token)
            live = [q for q in live if not q.done]
            while live:
                started = time.perf_counter()
                chosen = self._decode(live, step)
                self.stats["decode_s"] += time.perf_counter() - started
                self.stats["decode_steps"] += 1
                step += 1
                for q, token in chosen:
                    yield from self._emit(q, token)
                live = [q for q in live if not q.done]
        finally:
            held = set(self.pool.sequences())
            for q in seqs:
                if q.key in held:
                    self.pool.free(q.key)

    def new_sequences(self, prompts, max_new_tokens, sampling, stop_token_ids, ignore_eos) -> list:
        """The prompts as checked SequenceStates (EngineError names the prompt or setting at fault)."""
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence) or not prompts:
            raise EngineError("generate: prompts must be a non-empty list of token-id lists")
        if len(prompts) > MAX_BATCH:
            raise EngineError(
                f"generate: {len(prompts)} prompts, more than the programs' batch of {MAX_BATCH}"
            )
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise EngineError(f"generate: max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        settings = sampling if isinstance(sampling, (list, tuple)) else [sampling] * len(prompts)
        if len(settings) != len(prompts):
            raise EngineError(f"generate: {len(settings)} sampling settings for {len(prompts)} prompts")
        spec = self.model.spec
        try:
            stops = frozenset(int(t) for t in stop_token_ids)
        except (TypeError, ValueError):
            raise EngineError(f"generate: stop_token_ids must be token ids, got {stop_token_ids!r}") from None
        stops |= frozenset() if ignore_eos else frozenset(spec.eos_token_id)
        if any(isinstance(k, tuple) and k[:1] == ("engine",) for k in self.pool.sequences()):
            raise EngineError("generate: the engine is already generating (finish or close the stream first)")
        seqs = []
        for i, (prompt, setting) in enumerate(zip(prompts, settings)):
            ids = np.asarray(prompt) if isinstance(prompt, (Sequence, np.ndarray)) else None
            if ids is None or isinstance(prompt, (str, bytes)) or ids.ndim != 1 or (
                    ids.size and ids.dtype.kind not in "iu"):
                raise EngineError(
                    f"generate: prompt {i} must be a list of token ids (ints), got {str(prompt)[:80]}"
                )
            tokens = [int(t) for t in ids]
            if setting is not None and not isinstance(setting, Sampling):
                raise EngineError(
                    f"generate: sampling must be a serving.sampling.Sampling (or a list of them), "
                    f"got {type(setting).__name__}"
                )
            if not tokens or any(not 0 <= t < spec.vocab for t in tokens):
                raise EngineError(f"generate: prompt {i} must hold 1 or more token ids in [0, {spec.vocab})")
            if len(tokens) + max_new_tokens > spec.max_positions:
                raise EngineError(
                    f"generate: prompt {i} has {len(tokens)} tokens; with {max_new_tokens} new ones it "
                    f"passes the model's {spec.max_positions} positions"
                )
            setting = (setting or Sampling()).check(self.candidates)
            seen = np.zeros(spec.vocab, np.float32)
            seen[tokens] = 1.0
            seqs.append(SequenceState(i, tokens, len(tokens), setting, stops, max_new_tokens, seen,
                                  done=max_new_tokens == 0))
        return seqs

    def _emit(self, q: SequenceState, token: int):
        q.out.append(token)
        q.tokens.append(token)
        q.seen[token] = 1.0
        self.stats["tokens"] += 1
        if token in q.stops or len(q.out) >= q.limit:
            q.done = True
            self.pool.free(q.key)
        yield q.index, token

    def _feeds(self, seqs, ids, positions, counts, step) -> dict:
        pool = self.pool
        keys = [q.key for q in seqs]
        starts = [q.cached for q in seqs]
        for q, n in zip(seqs, counts):
            pool.allocate(q.key, n)
        feeds = {
            "ids": ids,
            "positions": positions,
            "cached": np.array(starts, np.float32),
            "lengths": np.array(starts, np.float32) + counts,
            "block_table": pool.block_tables(keys),
            "slots": pool.slot_matrix(keys, starts, counts, ids.shape[1]),
            "penalty": np.array([q.sampling.repetition_penalty for q in seqs], np.float32),
            "seen": np.stack([q.seen for q in seqs]),
        }
        return feeds

    def store(self, seqs, counts, out) -> None:
        """Keep a step's written pool arrays; each sequence now caches its chunk's tokens too."""
        pool = self.pool
        for layer in range(pool.n_layers):
            name = pool.input_name(layer, "kv")
            written = out[name]
            if isinstance(written, OnDevice):
                continue  # written in place, where it lies
            if self._resident is not None:  # (the program wrote a copy of the pool: hold that instead)
                self._resident.put(name, written)
            else:
                pool.store(layer, kv=written)
        for q, n in zip(seqs, counts):
            q.cached += n

    def _prefill(self, seqs, step) -> list:
        """One chunk of every unfinished prompt, in groups whose padding the scratch pages hold."""
        room = self.pool.scratch_pages * self.pool.page_size
        chosen, group = [], []
        for q in sorted(seqs, key=lambda q: -(q.prompt_len - q.cached)):
            n = min(q.prompt_len - q.cached, self.prefill_chunk)
            width = max([min(p.prompt_len - p.cached, self.prefill_chunk) for p in group] + [n])
            padding = sum(width - min(p.prompt_len - p.cached, self.prefill_chunk) for p in group) + width - n
            if group and padding > room:
                chosen += self._prefill_group(group, step)
                group = []
            group.append(q)
        return chosen + self._prefill_group(group, step)

    def _prefill_group(self, seqs, step) -> list:
        counts = [min(q.prompt_len - q.cached, self.prefill_chunk) for q in seqs]
        width = max(counts)
        ids = np.zeros((len(seqs), width), np.int32)
        positions = np.zeros((len(seqs), width), np.int32)
        for b, (q, n) in enumerate(zip(seqs, counts)):
            ids[b, :n] = q.tokens[q.cached:q.cached + n]
            positions[b, :n] = np.arange(q.cached, q.cached + n)
        feeds = self._feeds(seqs, ids, positions, counts, step)
        feeds["last"] = (np.arange(len(seqs)) * width + np.array(counts) - 1).astype(np.int32)
        out = self.choose(seqs, self.program("prefill")(feeds), step)
        self.store(seqs, counts, out)
        self._record("prefill", seqs, out)
        return [(q, int(t)) for q, t in zip(seqs, out["token"]) if q.cached == q.prompt_len]

    def _decode(self, seqs, step) -> list:
        ids = np.array([[q.tokens[-1]] for q in seqs], np.int32)
        positions = np.array([[q.cached] for q in seqs], np.int32)
        counts = [1] * len(seqs)
        feeds = self._feeds(seqs, ids, positions, counts, step)
        out = self.choose(seqs, self.program("decode")(feeds), step)
        self.store(seqs, counts, out)
        self._record("decode", seqs, out)
        return [(q, int(t)) for q, t in zip(seqs, out["token"])]

    def choose(self, seqs, out, step: int) -> dict:
        """The step's outputs, with the sampler's tokens when a sequence samples (greedy rows are
        greedy there too)."""
        if any(q.sampling.temperature > 0 for q in seqs):
            feeds = sampling_feeds([q.sampling for q in seqs], np.stack([q.seen for q in seqs]), step)
            out = {**out, "token": self.program("sampler")({"logits": out["logits"], **feeds})["token"]}
        return out

    def _record(self, kind, seqs, out) -> None:
        if self.trace is not None:
            self.trace.append((kind, [q.index for q in seqs], np.array(out["logits"])))
