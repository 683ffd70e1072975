"""The two serving programs: prefill (a chunk of C tokens per sequence) and decode (one token).

Both are one graph builder, `step_graph(model, pool, chunk)`, with symbolic batch B, chunk C and
block-table width NP, so one compiled program runs every batch and every cache length. Each layer's
attention reads its cache from the paged pool (serving.kv_cache: one array of slots per layer and
K or V, (slots, kv_heads, head_dim)) through a Gather of whole pages by the sequences' block tables
(B, NP), and attends over those cached positions (masked to each sequence's length `cached`) followed by the chunk's own keys (causal).
Positions the mask excludes are read as zero as well as scored -inf, so whatever a page holds past a
sequence's end (another sequence's values, poison) cannot reach its output.

The chunk's new keys and values are written into their slots by the program itself (write_slots,
a Scatter into the pool's own buffer), or, with writes="host", returned for the engine to store
(for a backend without the Scatter). The program's other outputs are the logits of each
sequence's last token and, with a sampler, the next token (sampling.py).
"""
from __future__ import annotations

import math

from ..errors import RefcompError
from ..ops.attention import scaled_dot_product_attention
from ..ops.core import input as rc_input, iota
from ..ops.elementwise import where
from ..ops.movement import cat
from .kv_cache import PagedKVPool, context_mask, gather_pages, write_slots
from .models import Decoder

MAX_BATCH = 256
WRITES = ("graph", "host")


def step_graph(model: Decoder, pool: PagedKVPool, chunk, sampler=None, writes: str = "graph") -> dict:
    """Outputs of one step for `chunk` tokens per sequence (1 for decode, "C" for prefill). With
    writes="graph" the program writes the chunk's keys and values into the pool (write_slots, at the
    int32 `slots` (B, C)) and returns each updated pool array under its feed name; with "host" it
    returns them as `k.<layer>`, `v.<layer>` (B, C, kv_heads, head_dim) for the caller to store."""
    if writes not in WRITES:
        raise RefcompError(f"step_graph: writes must be one of {WRITES}, got {writes!r}")
    model.begin()
    batch = {"B": (1, MAX_BATCH)}
    ids = rc_input("ids", ("B", chunk), "int32", ranges=batch)
    positions = rc_input("positions", ("B", chunk), "int32", ranges=batch)
    cached = rc_input("cached", ("B",), ranges=batch)
    table = rc_input("block_table", ("B", "NP"), "int32", ranges={**batch, "NP": (1, pool.num_pages)})
    slots = rc_input("slots", ("B", chunk), "int32", ranges=batch) if writes == "graph" else None
    b, c, width = ids.shape[0], ids.shape[1], table.shape[1] * pool.page_size
    valid = context_mask(cached, width)  # (B, NP * S): cached positions in use
    causal = iota((c, c), 1) <= iota((c, c), 0)
    mask = cat([valid.unsqueeze(1).unsqueeze(1).expand(b, 1, c, width),
                causal.unsqueeze(0).unsqueeze(0).expand(b, 1, c, c)], -1)
    keep = valid.unsqueeze(1).unsqueeze(-1)  # (B, 1, NP * S, 1)
    new = {}

    def attend(layer, q, k, v):
        """q (B, heads, C, hd); k, v (B, kv_heads, C, hd): attention over the cache, then the chunk."""
        arrays = [pool.input(layer, which) for which in ("k", "v")]
        kc, vc = (gather_pages(a, table, pool.page_size).permute(0, 2, 1, 3) for a in arrays)
        keys = cat([where(keep, kc, 0.0), k], 2)
        values = cat([where(keep, vc, 0.0), v], 2)
        for which, array, rows in zip("kv", arrays, (k, v)):
            rows = rows.permute(0, 2, 1, 3)  # (B, C, kv_heads, hd)
            if writes == "graph":
                new[pool.input_name(layer, which)] = write_slots(array, slots, rows)
            else:
                new[f"{which}.{layer}"] = rows
        return scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=1.0 / math.sqrt(pool.head_dim),
                                            enable_gqa=True)

    h = model.hidden(ids, positions, attend)  # (B, C, d)
    if chunk == 1:
        rows = h[:, 0]
    else:  # each sequence's last real token: row b * C + n_b - 1 of the flattened chunk
        last = rc_input("last", ("B",), "int32", ranges=batch)
        rows = h.reshape((b * c, h.shape[2])).index_select(0, last)
    logits = model.logits(rows)
    outputs = {"logits": logits, **new}
    if sampler is not None:
        outputs["token"] = sampler(logits)
    return outputs


def full_graph(model: Decoder):
    """The plain full-sequence forward: ids and positions (B, T) -> logits (B, T, vocab), causal
    attention and no cache, the oracle the per-step logits are checked against."""
    model.begin()
    ids = rc_input("ids", ("B", "T"), "int32")
    positions = rc_input("positions", ("B", "T"), "int32")

    def attend(layer, q, k, v):
        return scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    return model.logits(model.hidden(ids, positions, attend))
