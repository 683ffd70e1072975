"""The paged KV cache: a host-side pool of fixed-size pages, its allocator, and the graph pieces that
read and write it.

Layout. Each layer has one array shaped (num_pages * page_size, 2, n_kv_heads, head_dim): a flat
array of *slots*, slot `page * page_size + offset` holding one token's keys for every KV head and,
beside them, its values (`kv[l]`; `k[l]` and `v[l]` are views of its halves). Page p is rows
[p * page_size, (p + 1) * page_size). Flat slots make both directions one primitive each: a write
is a Scatter of N rows at N slot ids (`write_slots`, through index_copy, which writes only those
rows, in the pool's own buffer: keys and values together), and a read is a Gather of whole pages by
a block table (`gather_pages`), the pool viewed as (num_pages, page_size * row) rows. The helpers
take either a (slots, Hkv, D) array or the (slots, 2, Hkv, D) one.

Sequences own pages through block tables: `allocate(seq, n)` reserves room for n more tokens (taking
pages from the free list, lowest id first, so runs are deterministic), `free(seq)` returns them.
`block_tables(seqs)` pads each table to the longest with page 0, so a padded entry reads some
page's stale contents: the model must mask positions at or past a sequence's length by a select
(`gather_pages(..., lengths=)` zeroes them, `context_mask` and `rc.where` drop their scores),
never by adding -inf to whatever was read (NaN + -inf is NaN, and 0 * NaN in `p @ v` too).

A step's program may read the old pool (`gather_pages(pool, ...)`, then attend over the chunk's own
rows beside it) or the updated one (`gather_pages(write_slots(pool, slots, new), ...)`): either way
the Scatter writes the new rows into the fed buffer itself (old-pool Gathers run first), and the
updated pool, an output for `store`, costs no copy. Any other reader of the pool input (an
elementwise use, a second write) gets a copy of the whole pool first (ops.graph.own_scatter_tables).

`scratch_pages` extra pages, never allocated to a sequence, give padded positions of a batched
chunk slots of their own (`slot_matrix`): a Scatter refuses repeated ids, and writing the padding
into a live page would corrupt it.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

from ..errors import KVCacheError
from ..ops.core import dtype_name
from ..ops.elementwise import where
from ..ops.tensor import input as rc_input, iota, lift
from ..symbolic.dims import dim as make_dim, dims_equal, prod

__all__ = ["PagedKVPool", "gather_pages", "gather_slots", "write_slots", "context_mask"]


def _count(value, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise KVCacheError(f"{what} must be an int >= {low}, got {value!r}")
    return int(value)


class PagedKVPool:
    """Every layer's keys and values, in pages, with a free list and per-sequence block tables."""

    def __init__(self, num_pages: int, page_size: int, n_layers: int, n_kv_heads: int, head_dim: int,
                 dtype: str = "float32", scratch_pages: int = 0, name: str = "kv"):
        self.num_pages = _count(num_pages, "num_pages", 1)
        self.page_size = _count(page_size, "page_size", 1)
        self.n_layers = _count(n_layers, "n_layers", 1)
        self.n_kv_heads = _count(n_kv_heads, "n_kv_heads", 1)
        self.head_dim = _count(head_dim, "head_dim", 1)
        self.scratch_pages = _count(scratch_pages, "scratch_pages")
        self.dtype, self.name = dtype_name(dtype, "PagedKVPool's dtype"), name
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise KVCacheError(f"a KV pool holds float32, float16 or bfloat16 values, not {self.dtype}")
        numpy_type = (
            np.float16 if self.dtype == "float16" else np.float32
        )  # what its feeds take (bfloat16: float32 values)
        self.kv = [np.zeros(self.kv_shape, numpy_type) for _ in range(self.n_layers)]
        self.k = [kv[:, 0] for kv in self.kv]  # views: a layer's keys and values side by side in slots
        self.v = [kv[:, 1] for kv in self.kv]
        self._free = list(range(self.num_pages))  # kept sorted: the lowest free page is taken first
        self._tables: dict = {}
        self._lengths: dict = {}
        self._refs: dict = {}  # page -> holders (sequences whose table names it, and `retain` calls)

    def __repr__(self) -> str:
        return (f"<PagedKVPool {self.num_pages} pages of {self.page_size} tokens, {self.n_layers} layers x "
                f"{self.n_kv_heads} KV heads x {self.head_dim}, {len(self._free)} pages free>")

    # --- shapes and feeds ------------------------------------------------------------------------
    @property
    def slots_total(self) -> int:
        """Rows of each layer's array: the sequences' pages, then the scratch pages."""
        return (self.num_pages + self.scratch_pages) * self.page_size

    @property
    def shape(self) -> tuple:
        """A layer's K (or V) array: (slots, n_kv_heads, head_dim)."""
        return (self.slots_total, self.n_kv_heads, self.head_dim)

    @property
    def kv_shape(self) -> tuple:
        """A layer's K and V side by side, (slots, 2, n_kv_heads, head_dim): what the serving programs
        read and write, so one Scatter writes a token's keys and values together."""
        return (self.slots_total, 2, self.n_kv_heads, self.head_dim)

    def input_name(self, layer: int, which: str) -> str:
        """The feed name of a layer's K ("k"), V ("v") or both ("kv") array: `kv_k3`, `kv_kv3`."""
        self._layer(layer)
        if which not in ("k", "v", "kv"):
            raise KVCacheError(f"which must be 'k', 'v' or 'kv', got {which!r}")
        return f"{self.name}_{which}{layer}"

    def input(self, layer: int, which: str):
        """The rc.input that reads a layer's K, V or KV array (a static shape: the pool never grows)."""
        shape = self.kv_shape if which == "kv" else self.shape
        return rc_input(self.input_name(layer, which), shape, self.dtype)

    def feeds(self) -> dict:
        """Every layer's KV array by feed name (the inputs of the serving programs)."""
        return {self.input_name(layer, "kv"): self.kv[layer] for layer in range(self.n_layers)}

    def store(self, layer: int, k: Optional[np.ndarray] = None, v: Optional[np.ndarray] = None,
              kv: Optional[np.ndarray] = None) -> None:
        """Keep a program's updated arrays of `layer` (what write_slots returned) as the pool's: the whole
        KV array, or its K or V half."""
        self._layer(layer)
        for which, new, shape in (("kv", kv, self.kv_shape), ("k", k, self.shape), ("v", v, self.shape)):
            if new is None:
                continue
            new = np.asarray(new)
            if new.shape != shape:
                raise KVCacheError(
                    f"{self.input_name(layer, which)}: an update must have the pool's shape {shape}, "
                    f"got {new.shape}"
                )
            if which == "kv":
                self.kv[layer] = new.astype(self.kv[layer].dtype, copy=False)
                self.k[layer], self.v[layer] = self.kv[layer][:, 0], self.kv[layer][:, 1]
            else:
                self.kv[layer][:, 0 if which == "k" else 1] = new

    def _layer(self, layer: int) -> int:
        if (
            isinstance(layer, bool)
            or not isinstance(layer, (int, np.integer))
            or not 0 <= layer < self.n_layers
        ):
            raise KVCacheError(f"layer {layer!r} is not one of the pool's {self.n_layers} layers")
        return int(layer)

    # --- the allocator -----------------------------------------------------------------------------
    @property
    def free_pages(self) -> int:
        return len(self._free)

    def sequences(self) -> list:
        return list(self._tables)

    def length(self, seq_id) -> int:
        """Tokens the sequence holds."""
        return self._lengths[self._held(seq_id)]

    def pages(self, seq_id) -> list:
        """The sequence's block table: its pages, in token order."""
        return list(self._tables[self._held(seq_id)])

    def _held(self, seq_id):
        if seq_id not in self._tables:
            raise KVCacheError(f"sequence {seq_id!r} holds no pages of this pool (allocate first)")
        return seq_id

    def allocate(self, seq_id, n_tokens: int) -> np.ndarray:
        """Room for `n_tokens` more tokens of `seq_id` (a new id starts empty): pages are added to its
        block table as needed and its length grows by n_tokens. Returns the new tokens' slots (int32).
        A pool without enough free pages raises KVCacheError and changes nothing."""
        n_tokens = _count(n_tokens, f"allocate({seq_id!r}, n_tokens)")
        table = self._tables.get(seq_id, [])
        start = self._lengths.get(seq_id, 0)
        need = -(-(start + n_tokens) // self.page_size) - len(table)
        if need > len(self._free):
            raise KVCacheError(f"the KV pool is full: sequence {seq_id!r} needs {need} more page(s) of "
                               f"{self.page_size} tokens, {len(self._free)} of {self.num_pages} are free "
                               f"(free finished sequences, or make a larger pool)")
        taken, self._free = self._free[:max(need, 0)], self._free[max(need, 0):]
        for page in taken:
            self._refs[page] = 1
        self._tables[seq_id] = table + taken
        self._lengths[seq_id] = start + n_tokens
        return self.slots(seq_id, start, n_tokens)

    def pages_for(self, seq_id, n_tokens: int) -> int:
        """Free pages `allocate(seq_id, n_tokens)` would take."""
        table = self._tables.get(seq_id, [])
        return max(-(-(self._lengths.get(seq_id, 0) + n_tokens) // self.page_size) - len(table), 0)

    def free(self, seq_id) -> None:
        """Drop the sequence's hold on its pages; a page nobody else holds returns to the free list
        (its contents stay until overwritten)."""
        pages = self._tables.pop(self._held(seq_id))
        del self._lengths[seq_id]
        self.release(pages)

    # --- shared pages (the prefix cache's) -------------------------------------------------------------
    def adopt(self, seq_id, pages: Sequence[int]) -> None:
        """Start `seq_id` with full `pages` that others hold (a cached prefix): it holds them too, and
        its length is theirs; its own tokens go to pages of its own after them. Pages are append-only,
        so a shared page is never written again."""
        if seq_id in self._tables:
            raise KVCacheError(f"adopt: sequence {seq_id!r} already holds pages (adopt starts a sequence)")
        self.retain(pages)
        self._tables[seq_id] = list(pages)
        self._lengths[seq_id] = len(pages) * self.page_size

    def retain(self, pages: Iterable[int]) -> None:
        """One more hold on each of `pages`, which someone must hold already."""
        pages = list(pages)
        for page in pages:
            if self._refs.get(page, 0) < 1:
                raise KVCacheError(f"page {page!r} is free: only a held page can be shared")
        for page in pages:
            self._refs[page] += 1

    def release(self, pages: Iterable[int]) -> None:
        """Drop one hold on each of `pages`; those nobody holds any more become free."""
        freed = []
        for page in pages:
            self._refs[page] -= 1
            if self._refs[page] == 0:
                del self._refs[page]
                freed.append(page)
        if freed:
            self._free = sorted(self._free + freed)

    def holders(self, page: int) -> int:
        """How many sequences and `retain` calls hold `page` (0: free)."""
        return self._refs.get(page, 0)

    def slots(self, seq_id, start: int, count: int) -> np.ndarray:
        """Flat slot ids (int32) of the sequence's tokens start .. start + count - 1, which it must hold."""
        start, count = _count(start, "slots' start"), _count(count, "slots' count")
        table, length = self.pages(seq_id), self.length(seq_id)
        if start + count > length:
            raise KVCacheError(
                f"sequence {seq_id!r} holds {length} tokens: positions {start} .. {start + count - 1} "
                f"are not all allocated"
            )
        positions = np.arange(start, start + count)
        pages = np.asarray(table, np.int64)[positions // self.page_size] if count else np.zeros(0, np.int64)
        return (pages * self.page_size + positions % self.page_size).astype(np.int32)

    def block_tables(self, seq_ids: Sequence) -> np.ndarray:
        """int32 (B, max pages): row b is sequence b's pages in order, padded with page 0 (read, then
        masked: see the module's docstring). At least one column, so a Gather always has a page."""
        tables = [self.pages(s) for s in seq_ids]
        width = max([len(t) for t in tables] + [1])
        out = np.zeros((len(tables), width), np.int32)
        for b, t in enumerate(tables):
            out[b, :len(t)] = t
        return out

    def lengths(self, seq_ids: Iterable) -> np.ndarray:
        """int32 (B,): each sequence's token count."""
        return np.array([self.length(s) for s in seq_ids], np.int32)

    def slot_matrix(
        self, seq_ids: Sequence, starts: Sequence[int], counts: Sequence[int], width: int
    ) -> np.ndarray:
        """int32 (B, width): sequence b's slots for tokens starts[b] .. starts[b] + counts[b] - 1, then
        distinct scratch slots for the padding, so a batched chunk writes every row somewhere harmless."""
        width = _count(width, "slot_matrix's width")
        if not len(seq_ids) == len(starts) == len(counts):
            raise KVCacheError(
                f"slot_matrix takes one start and one count per sequence: {len(seq_ids)} sequences, "
                f"{len(starts)} starts, {len(counts)} counts"
            )
        out = np.zeros((len(seq_ids), width), np.int32)
        spare = iter(range(self.num_pages * self.page_size, self.slots_total))
        for b, (s, start, count) in enumerate(zip(seq_ids, starts, counts)):
            if count > width:
                raise KVCacheError(
                    f"sequence {s!r} writes {count} tokens, more than the chunk's width {width}"
                )
            out[b, :count] = self.slots(s, start, count)
            for j in range(count, width):
                slot = next(spare, None)
                if slot is None:
                    raise KVCacheError(
                        f"a chunk of {len(seq_ids)} x {width} tokens pads more positions than the pool's "
                        f"{self.scratch_pages} scratch page(s) of {self.page_size} hold (scratch_pages=)"
                    )
                out[b, j] = slot
        return out


# --- graph pieces -------------------------------------------------------------------------------------
def _pool_tensor(pool, what: str):
    pool = lift(pool)
    if pool.ndim not in (3, 4):
        raise KVCacheError(
            f"{what}: the pool {pool.label} must be (slots, n_kv_heads, head_dim) or (slots, 2, n_kv_heads, "
            f"head_dim), got {tuple(pool.shape)}"
        )
    return pool


def _int_ids(ids, what: str):
    ids = lift(ids)
    if ids.dtype != "int32":
        raise KVCacheError(f"{what}: {ids.label} must be int32 ids, got {ids.dtype}")
    return ids


def gather_pages(pool, block_table, page_size: int, length=None, lengths=None):
    """Each sequence's cached rows in token order, (B, L, *row) (row: (Hkv, D), or (2, Hkv, D) for a
    KV array): the pages its block table (int32 (B, P)) names, read by one Gather (ids checked at
    run time against the pool's pages),
    L = P * page_size, or the first `length` positions (an int or a dim name such as "T").
    Positions at or past a sequence's own length hold stale data (another sequence's, NaN even):
    given `lengths` ((B,) float), they read as 0, by a select, so that `p @ v` with p = 0 there
    stays finite (0 * NaN is NaN); the scores there still need a select to -inf (`context_mask`)."""
    pool = _pool_tensor(pool, "gather_pages")
    table = _int_ids(block_table, "gather_pages' block table")
    page_size = _count(page_size, "gather_pages' page_size", 1)
    if table.ndim != 2:
        raise KVCacheError(
            f"gather_pages: the block table {table.label} must be (B, pages), got {tuple(table.shape)}"
        )
    slots, row = pool.shape[0], tuple(pool.shape[1:])
    if isinstance(slots, int) and slots % page_size:
        raise KVCacheError(f"gather_pages: the pool's {slots} slots are not whole pages of {page_size}")
    pages = pool.reshape((slots // page_size, page_size * prod(row)))
    b, p = table.shape
    out = pages.index_select(0, table).reshape((b, p * page_size) + row)
    out = out if length is None else out[:, :length]
    if lengths is None:
        return out
    held = context_mask(lengths, out.shape[1]).reshape((b, out.shape[1]) + (1,) * len(row))
    return where(held, out, 0.0)


def gather_slots(pool, slots):
    """The rows at int32 slot ids of any shape S: (*S, Hkv, D), one Gather (ids checked at run time)."""
    pool = _pool_tensor(pool, "gather_slots")
    return pool.index_select(0, _int_ids(slots, "gather_slots' slots"))


def write_slots(pool, slots, new):
    """The pool with the rows at `slots` replaced by `new`: slots int32 of shape S (any, e.g. (B, C)),
    new (*S, *row), row the pool's (Hkv, D) or (2, Hkv, D). One Scatter (index_copy along the
    slots): the kernel writes only those rows, into the pool's own buffer when the pool is an input
    nothing else reads. Ids outside the pool or repeated are refused at run time on every backend."""
    pool = _pool_tensor(pool, "write_slots")
    slots = _int_ids(slots, "write_slots' slots")
    new = lift(new)
    want = tuple(slots.shape) + tuple(pool.shape[1:])
    if new.ndim != len(want) or not all(dims_equal(a, b) for a, b in zip(new.shape, want)):
        raise KVCacheError(
            f"write_slots: {new.label} must have shape {want} (the slots' shape, then the pool's "
            f"row), got {tuple(new.shape)}"
        )
    flat = slots.reshape((prod(slots.shape),)) if slots.ndim != 1 else slots
    rows = new.reshape((flat.shape[0],) + tuple(pool.shape[1:]))
    if rows.dtype != pool.dtype:
        rows = rows.to(pool.dtype)
    return pool.index_copy(0, flat, rows)


def context_mask(lengths, length):
    """A (B, L) BoolTensor, true where position t < lengths[b]: the positions of each sequence that
    gather_pages' result really holds. `lengths` is (B,) float (refcomp's int32 tensors only index:
    feed `pool.lengths(seqs).astype(np.float32)`); `length` is L (an int or a dim name)."""
    lengths = lift(lengths)
    if lengths.ndim != 1 or lengths.dtype == "int32":
        raise KVCacheError(f"context_mask: lengths {lengths.label} must be a (B,) float tensor, got "
                           f"{tuple(lengths.shape)} {lengths.dtype}")
    positions = iota((1, make_dim(length)), 1)
    return positions.lt(lengths.reshape((lengths.shape[0], 1)))

