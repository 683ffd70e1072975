"""The two serving programs: prefill (a chunk of C tokens per sequence) and decode (one token).

Both are one graph builder, `step_graph(model, pool, chunk)`, with symbolic batch B, chunk C and
block-table width NP, so one compiled program runs every batch and every cache length. Each layer
first writes the chunk's keys and values into their slots (`write_slots`: a Scatter into the pool's own
buffer, the pool's only reader) and then reads the
sequence's pages from the written pool through a Gather by its block table (B, NP) (the
`kv_cache` module's write-then-read), so the chunk attends to its own tokens as to the cache.
Query t of a sequence sees key positions j <= cached + t below the sequence's length; positions
the mask excludes are selected away (scores -inf, values read as zero), so whatever a page holds
past a sequence's end (another sequence's values, poison) cannot reach its output. The outputs
are the logits of each sequence's last token, the chosen token, and the written pool arrays.
"""
from __future__ import annotations

import math

from ..ops.attention import scaled_dot_product_attention
from ..ops.core import input as rc_input, iota
from ..ops.elementwise import where
from ..ops.joining import stack
from .kv_cache import PagedKVPool, gather_pages, write_slots
from .models import Decoder

MAX_BATCH = 256


def step_graph(model: Decoder, pool: PagedKVPool, chunk, chooser=None) -> dict:
    """Outputs of one step for `chunk` tokens per sequence (1 for decode, "C" for prefill): the logits
    of each sequence's last token, the token `chooser(logits)` picks, and each layer's pool arrays
    with the chunk's keys and values written (under their feed names, for `pool.store`)."""
    model.begin()
    batch = {"B": (1, MAX_BATCH)}
    ids = rc_input("ids", ("B", chunk), "int32", ranges=batch)
    positions = rc_input("positions", ("B", chunk), "int32", ranges=batch)
    cached = rc_input("cached", ("B",), ranges=batch)  # tokens before the chunk
    lengths = rc_input("lengths", ("B",), ranges=batch)  # tokens after it (padding not counted)
    table = rc_input("block_table", ("B", "NP"), "int32", ranges={**batch, "NP": (1, pool.num_pages)})
    slots = rc_input("slots", ("B", chunk), "int32", ranges=batch)
    b, c, width = ids.shape[0], ids.shape[1], table.shape[1] * pool.page_size
    key = iota((1, 1, width), 2)
    query = cached.reshape((b, 1, 1)) + iota((1, c, 1), 1)  # each chunk token's position
    mask = (key <= query).logical_and(key < lengths.reshape((b, 1, 1))).unsqueeze(1)  # (B, 1, C, NP * S)
    new = {}

    def attend(layer, q, k, v):
        """q (B, heads, C, hd); k, v (B, kv_heads, C, hd): write the chunk's keys and values into
        their slots, then attend over the sequence's pages (the chunk's own positions included)."""
        rows = stack([k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)], 2)  # (B, C, 2, kv_heads, hd)
        written = write_slots(pool.input(layer, "kv"), slots, rows)  # one Scatter: keys and values
        new[pool.input_name(layer, "kv")] = written
        read = gather_pages(written, table, pool.page_size, lengths=lengths)  # (B, NP * S, 2, kv_heads, hd)
        keys, values = (read[:, :, which].permute(0, 2, 1, 3) for which in (0, 1))
        return paged_attention(q, keys, values, mask, pool.page_size)

    h = model.hidden(ids, positions, attend)  # (B, C, d)
    if chunk == 1:
        rows = h[:, 0]
    else:  # each sequence's last real token: row b * C + n_b - 1 of the flattened chunk
        last = rc_input("last", ("B",), "int32", ranges=batch)
        rows = h.reshape((b * c, h.shape[2])).index_select(0, last)
    logits = model.logits(rows)
    outputs = {"logits": logits, **new}
    if chooser is not None:
        outputs["token"] = chooser(logits)
    return outputs


def paged_attention(q, k, v, mask, page_size: int):
    """Softmax attention of q (B, heads, C, hd) over k, v (B, kv_heads, NP * page_size, hd) where
    `mask` (B, 1, C, NP * page_size) selects. Each group of heads sharing a key/value head is one
    batch of queries (no copies of K and V): rows (B, kv_heads, group * C) of scores over the keys,
    softmax(scores) @ v over the whole key axis. The rules `online_softmax` and `stream_scores` take
    that into one FlashAttention kernel, the pages looked up inside it (prefill, GPT-2 small at B=8,
    C=64: 130 -> 32 us a layer, modeled). Decode (C = 1) has one row a head, so the same kernel
    splits the keys across blocks and combines their partial softmaxes (flash-decoding, the `splits`
    parameter), its block computing the head's every value column (`n_tiles`): docs/serving.md."""
    b, heads, c, hd = q.shape
    kv_heads, width = k.shape[1], k.shape[2]
    group = heads // kv_heads
    queries = q.reshape((b, kv_heads, group * c, hd))
    scores = queries @ k.transpose(-2, -1)  # (B, kv_heads, group * C, width)
    rows = mask.unsqueeze(1).expand((b, kv_heads, group, c, width))
    rows = rows.reshape((b, kv_heads, group * c, width))
    weights = where(rows, scores * (1.0 / math.sqrt(hd)), -math.inf).softmax(-1)
    return (weights @ v).reshape((b, heads, c, hd))


def full_graph(model: Decoder):
    """The plain full-sequence forward: ids and positions (B, T) -> logits (B, T, vocab), causal
    attention and no cache, the oracle the per-step logits are checked against."""
    model.begin()
    ids = rc_input("ids", ("B", "T"), "int32")
    positions = rc_input("positions", ("B", "T"), "int32")

    def attend(layer, q, k, v):
        return scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    return model.logits(model.hidden(ids, positions, attend))
