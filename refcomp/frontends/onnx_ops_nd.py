"""ONNX GatherND and ScatterND with static indices: each indexed position is computed at import.

refcomp has no scatter and gathers only rows of a table by int32 ids, so both operators are written
over the data flattened to (positions, inner) rows: GatherND picks rows by their flat positions;
ScatterND picks, for every position of the data, the update row that writes it (an id table built
here), combines it with the data (reduction none, add, mul, max or min) and keeps the data where
no update writes (a static 0/1 mask). Indices must be concrete, as must the shapes they index.
"""
from __future__ import annotations

import numpy as np

from ..ops.elementwise import where
from ..ops.nn import embedding
from ..symbolic.dims import prod
from .onnx_ops_core import INT_TYPES, Value, op, static_value, type_name


def _flat_positions(ctx, data_shape, idx: np.ndarray, batch_dims: int) -> np.ndarray:
    """Flat positions over data_shape[:batch_dims + m] of each index tuple (m = idx.shape[-1])."""
    m = idx.shape[-1]
    if not all(isinstance(n, int) for n in data_shape):
        raise ctx.error(f"needs a data shape of known sizes, got {data_shape}")
    if batch_dims + m > len(data_shape):
        raise ctx.error(
            f"indices of depth {m} with batch_dims {batch_dims} exceed the data's rank {len(data_shape)}"
        )
    indexed = data_shape[batch_dims:batch_dims + m]
    bounds = np.array(indexed, np.int64)
    if idx.size and ((idx < -bounds).any() or (idx >= bounds).any()):
        raise ctx.error(
            f"indices {idx.min()}..{idx.max()} are out of range for the axes of sizes {list(indexed)}"
        )
    idx = np.where(idx < 0, idx + bounds, idx)
    within = (
        np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), indexed)
        if m
        else np.zeros(idx.shape[:-1], np.int64)
    )
    batch = np.indices(idx.shape[:batch_dims]).reshape(batch_dims, -1) if batch_dims else None
    if batch_dims:  # the leading batch axes index the data's leading axes in step
        batch_flat = np.ravel_multi_index(tuple(batch), data_shape[:batch_dims]).reshape(
            idx.shape[:batch_dims]
        )
        within = (
            batch_flat.reshape(batch_flat.shape + (1,) * (within.ndim - batch_dims)) * int(np.prod(indexed))
            + within
        )
    return within


def _static_indices(ctx, i: int) -> np.ndarray:
    ids = ctx.value(i)
    if ids.etype not in INT_TYPES:
        raise ctx.error(f"indices must be integers, got {type_name(ids.etype)}")
    idx = ctx.static(i, f"indices (input {i})")
    if idx.dtype == object or idx.ndim < 1:
        raise ctx.error(f"indices must be a concrete integer array of rank >= 1, got {idx.tolist()}")
    return idx.astype(np.int64)


def _rows(ctx, v: Value, depth: int):
    """The data as a (positions, inner) table of rows over its first `depth` axes."""
    t = ctx.as_tensor(v, "input 0 (data)")
    return t.reshape((prod(t.shape[:depth]), prod(t.shape[depth:]))), t.shape[depth:]


@op("GatherND", attrs=("batch_dims",))
def gather_nd(ctx):
    data, idx = ctx.value(0), _static_indices(ctx, 1)
    b = ctx.int_attr("batch_dims", 0)
    positions = _flat_positions(ctx, data.shape, idx, b)
    depth = b + idx.shape[-1]
    if data.is_static:
        flat = data.static.reshape((-1,) + data.static.shape[depth:])
        return static_value(flat[positions], data.etype)
    table, inner = _rows(ctx, data, depth)
    ids = ctx.importer.ids_tensor(
        static_value(positions.astype(np.int64), ctx.value(1).etype), table.shape[0], ctx
    )
    return Value(data.etype, tensor=embedding(ids, table).reshape(tuple(positions.shape) + tuple(inner)))


COMBINE = {"none": lambda old, new: new, "add": lambda old, new: old + new, "mul": lambda old, new: old * new,
           "max": lambda old, new: old.maximum(new), "min": lambda old, new: old.minimum(new)}


@op("ScatterND", attrs=("reduction",))
def scatter_nd(ctx):
    """Updates written in rounds: round r holds, for every position, its r-th update in index order (a
    static id table and a 0/1 mask), combined with what is there; as many rounds as a position is
    written at most, so duplicates combine in ONNX's order."""
    data, idx = ctx.value(0), _static_indices(ctx, 1)
    reduction = ctx.attr("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in COMBINE:
        raise ctx.attr_error("reduction", reduction, f"use one of {sorted(COMBINE)}")
    positions = _flat_positions(ctx, data.shape, idx, 0).reshape(-1)
    depth = idx.shape[-1]
    total = int(np.prod(data.shape[:depth]))
    if reduction == "none" and len(set(positions.tolist())) != positions.size:
        raise ctx.error(
            "indices write one position twice; ONNX leaves the result undefined without a reduction"
        )
    out, inner = _rows(ctx, data, depth)
    if not positions.size:  # nothing is written
        return Value(data.etype, tensor=out.reshape(tuple(data.shape)))
    rows = ctx.tensor(2).reshape((positions.size, prod(inner)))
    rounds: list[list[tuple[int, int]]] = []
    seen: dict[int, int] = {}
    for k, p in enumerate(positions.tolist()):
        r = seen.get(p, 0)
        seen[p] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append((p, k))
    for writes in rounds:
        source, written = np.zeros(total, np.int64), np.zeros((total, 1), np.float32)
        for p, k in writes:
            source[p], written[p] = k, 1.0
        ids = ctx.importer.ids_tensor(static_value(source, ctx.value(1).etype), positions.size, ctx)
        out = where(
            ctx.importer.materialize(static_value(written)),
            COMBINE[reduction](out, embedding(ids, rows)),
            out,
        )
    return Value(data.etype, tensor=out.reshape(tuple(data.shape)))
