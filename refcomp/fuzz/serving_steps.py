"""Generator steps for serving (issue 30): index_copy (a Scatter of rows at distinct ids, along any
axis), a maximum over a row as long as a vocabulary, and one decode step of attention over a paged
KV pool: the new keys written into their slots, every sequence's pages read back through its block
table, softmax(q . k) weighting them. Kept small (a pool of a few pages of 2 or 4 slots), so a fuzz
program stays cheap. Block tables are drawn ids, so rows often name the same pages: the prefix
cache's shared pages (issue 31) are in the graphs already; the scheduler and the cache themselves
are host logic, fuzzed by the property test of tests/test_serving_scheduler.py. Mixed into
`generator.Generator`, whose helpers (`pick`, `choice`, `emit`, `new_input`) they use."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .graph import simple_dim

SERVING_RATE = 0.1  # graphs that end with an index_copy or a paged attention step
LONG_MAX_RATE = 0.3  # of the index_copy ones: a maximum over a row of thousands instead
PROJECTED_RATE = 0.7  # of the paged attention steps: new rows that are columns of a projection
LONG_ROWS = (4096, 4800, 5005)  # >= split.MIN_EXTENT, <= graph.MAX_ELEMENTS; 5,005 = 5 x 7 x 11 x 13


class ServingSteps:
    def storage_output(self) -> Optional[str]:
        """Now and then one more output, an index_copy or a paged attention, drawn last and from a stream
        of its own: the rest of every graph is what it was without these steps."""
        rng = np.random.default_rng([self.graph.seed, self.graph.index, 30])
        if rng.random() >= SERVING_RATE:
            return None
        main, self.rng = self.rng, rng
        counter = self.counter
        try:
            self.step_scatter()
        finally:
            self.rng = main
        return self.graph.lines[-1][0] if self.counter > counter else None

    def step_scatter(self) -> None:
        if self.chance(0.4):
            return self.paged_attention()
        if self.chance(LONG_MAX_RATE):
            return self.long_max()
        v = self.pick(
            lambda v: (
                len(v.shape) >= 1
                and all(map(simple_dim, v.shape))  # the source is an input of v's shape
                and any(isinstance(d, int) and d >= 1 for d in v.shape)
            )
        )
        if v is None or self.chance(0.3):
            v = self.new_input((int(self.rng.integers(2, 9)), self.choice([1, 3, 4, "T"])))
        axes = [a for a, d in enumerate(v.shape) if isinstance(d, int) and d >= 1]
        axis = self.choice(axes)
        rows = v.shape[axis]
        count = int(self.rng.integers(1, rows + 1))
        ids = self.new_input((count,), "slots", rows)
        source = self.new_input(tuple(count if a == axis else d for a, d in enumerate(v.shape)))
        dim = axis - len(v.shape) if self.chance(0.4) else axis
        expr = (f"{v.name}.index_copy({dim}, {ids.name}, {source.name})" if self.chance(0.6)
                else f"rc.index_copy({v.name}, {dim}, {ids.name}, {source.name})")
        self.emit(expr, min(v.lo, source.lo), max(v.hi, source.hi), v.exact and source.exact, "index_copy")

    def long_max(self) -> None:
        """A maximum (or its index) over one row of thousands, as greedy sampling takes over a
        vocabulary: the search splits such a row into chunks exactly (search/split.py), which no
        other step's rows are long enough to reach."""
        row = self.new_input((1, self.choice(list(LONG_ROWS))))
        if self.chance(0.7):
            self.emit(f"{row.name}.amax(-1)", row.lo, row.hi, row.exact, "long_max")
        else:
            self.emit(f"{row.name}.argmax(-1)", 0.0, float(row.shape[1] - 1), True, "long_max")

    def projected_rows(self, batch, heads: int, width: int):
        """Now and then the new rows as a decode step makes them: columns of a projection x @ w (GPT-2's
        q/k/v matmul), or an elementwise function of an input (LLaMA's rotation of the keys), which
        the kernel computing them may write into the pool itself (search/carry.py). Drawn from a
        stream of its own, so the draws after it are those of earlier runs."""
        main, self.rng = self.rng, np.random.default_rng([self.graph.seed, self.graph.index, 44])
        try:
            if not self.chance(PROJECTED_RATE):
                return None
            if self.chance(0.3):
                x = self.new_input((batch, heads, width))
                return self.emit(f"{x.name}.sin() * 1.5", -1.5, 1.5, False, "paged_rotation")
            depth, before, after = self.choice([8, 48, 96]), self.choice([0, 4]), self.choice([0, 2])
            x = self.new_input((batch, depth))
            w = self.new_input((depth, before + heads * width + after))
            bound = depth * max(abs(x.lo), abs(x.hi)) * max(abs(w.lo), abs(w.hi))
            columns = f"[:, {before}:{before + heads * width}]"
            return self.emit(f"({x.name} @ {w.name}){columns}.reshape(({batch!r}, {heads}, {width}))",
                             -bound, bound, False, "paged_projection")
        finally:
            self.rng = main

    def paged_attention(self) -> None:
        """q (B, H, D) attends over B sequences' pages of a pool (pages * size, H, D) after writing each
        sequence's new row at its slot; the same pool serves as keys and values."""
        pages, size, heads, width = (
            int(self.rng.integers(2, 5)),
            self.choice([2, 4]),
            self.choice([1, 2]),
            self.choice([2, 4]),
        )
        slots = pages * size
        pool = self.new_input((slots, heads, width))
        batch = self.choice(["B", 1, 2]) if slots >= 7 else self.choice([1, 2])
        slot_ids = self.new_input((batch,), "slots", slots)
        new = self.new_input((batch, heads, width))
        # pages of 4 are listed T to a row, priced at 64 (256 keys): serving's attention below may split
        # its keys across blocks, and runs at the check's small counts with most splits empty (the
        # draw of a fixed count is kept, so the draws after it stay those of earlier runs)
        listed = int(self.rng.integers(1, 3))
        table = self.new_input((batch, "T" if size == 4 else listed), "ids", pages)
        q = self.new_input((batch, heads, width))
        new = self.projected_rows(batch, heads, width) or new
        lo, hi = min(pool.lo, new.lo), max(pool.hi, new.hi)
        write = f"rc.serving.write_slots({pool.name}, {slot_ids.name}, {new.name})"
        written = self.emit(write, lo, hi, new.exact, "paged_write")
        if written is None:
            return
        # the values from the updated pool; the keys from it too, or from the old pool, whose Gather must
        # then run before the Scatter writes the pool's buffer in place
        values = self.emit(
            f"rc.serving.gather_pages({written.name}, {table.name}, {size})", lo, hi, True, "paged_gather"
        )
        source = written.name if self.chance(0.5) else pool.name
        keys = self.emit(
            f"rc.serving.gather_pages({source}, {table.name}, {size})", lo, hi, True, "paged_gather"
        )
        if keys is None or values is None:
            return
        bound = width * max(abs(lo), abs(hi)) * max(abs(q.lo), abs(q.hi)) / math.sqrt(width)
        scores = self.emit(
            f"({q.name}.unsqueeze(1) * {keys.name}).sum(-1) * {1 / math.sqrt(width)!r}",
            -bound,
            bound,
            False,
            "paged_scores",
        )
        if scores is None:
            return
        if size == 2:  # normalised weights, then their sum of values
            weights = self.emit(f"{scores.name}.softmax(1)", 0.0, 1.0, False, "paged_softmax")
            if weights is not None:
                self.emit(
                    f"({weights.name}.unsqueeze(-1) * {values.name}).sum(1)", lo, hi, False, "paged_attention"
                )
            return
        # pages of 4: serving's own attention, one query a head, softmax @ V over the whole key axis
        # under a mask (all kept), which the online kernel takes, its keys split across blocks where
        # the model says so (flash-decoding; no extra random draw: the pool's page size chooses)
        k4, v4 = (f"{t.name}.permute(0, 2, 1, 3)" for t in (keys, values))
        mask = f"(rc.ones_like({v4}[:, :1, :, 0].unsqueeze(2)) > 0)"
        self.emit(f"rc.serving.paged_attention({q.name}.unsqueeze(2), {k4}, {v4}, {mask}, {size})[:, :, 0]",
                  lo, hi, False, "paged_attention")
