"""Comparisons with PyTorch for the ATen table's indexing, nn, reduction and integer rows (the
elementwise and view rows are in torch_export_cases.py, whose helpers these use)."""
from __future__ import annotations

import torch
from torch_export_cases import A, IDX, IDX2, NEG, ZERO, add, case, f, ints, mask

SLOTS = torch.tensor([3, 0])  # distinct ids, as index_put (index_copy) needs
BAGS, BAG, BAGS_LAST = torch.tensor([0, 2, 2]), torch.tensor([0, 3]), torch.tensor([0, 1, 4])  # bag offsets

# --- indexing ----------------------------------------------------------------------------------------
add(
    "aten.index.Tensor",
    case(lambda x: A.index.Tensor(x, [IDX]), f(3, 4)),
    case(lambda x: A.index.Tensor(x, [None, IDX2]), f(2, 4, 3)),
    case(lambda x: A.index.Tensor(x, [NEG, None, NEG]), f(3, 2, 4)),
    case(lambda x: A.add.Tensor(x, A.index.Tensor(IDX2, [NEG[:2]])), f(2)),
    case(lambda x, i: A.index.Tensor(x, [i]), f(10, 3), ints(2, 5, hi=10)),
    # indices computed at run time (checked before the lookup), negative ones counted from the end
    case(lambda x, i: A.index.Tensor(x, [A.sub.Tensor(A.remainder.Scalar(A.mul.Tensor(i, 7), 10), 5)]),
         f(10, 3), ints(2, 5, hi=10**6), emulator=True),
    case(lambda x, i: A.index.Tensor(
        x, [A.remainder.Scalar(i, 4), A.remainder.Scalar(A.add.Tensor(i, 1), 3)]), f(4, 3), ints(6, hi=100)),
    case(
        lambda x: A.index.Tensor(x, [A.arange.start_step(0, x.shape[0]), A.arange.start_step(0, x.shape[0])]),
        f(4, 4),
        dynamic=True,
    ),
    case(
        lambda x: A.index.Tensor(
            x,
            [
                A.unsqueeze.default(A.arange.start_step(0, x.shape[0]), 1),
                A.unsqueeze.default(A.arange.start_step(0, 3), 0),
            ],
        ),
        f(4, 5),
        dynamic=True,
    ),
)
add("aten.index_select.default", case(lambda x: A.index_select.default(x, 1, IDX), f(2, 3)),
    case(lambda x, i: A.index_select.default(x, 0, i), f(6, 2), ints(4, hi=6)))
add(
    "aten.index_put.default",
    case(lambda x, v: A.index_put.default(x, [None, SLOTS], v), f(2, 4), f(2, 2)),
    case(
        lambda x, i, v: A.index_put.default(x, [i], v),
        f(6, 3),
        torch.tensor([5, 1, 2]),
        f(3, 3),
        emulator=True,
    ),
    case(lambda x, i, v: A.index_put.default(x, [i], v), f(6, 3), torch.tensor([4, 0]), f(3)),
)
add("aten.gather.default", case(lambda x: A.gather.default(x, 1, IDX2), f(2, 4)),
    case(lambda x, i: A.gather.default(x, 0, i), f(5, 3), ints(2, 3, hi=5)),
    case(lambda x, i: A.gather.default(x, 0, A.remainder.Scalar(A.mul.Tensor(i, 3), 5)), f(5, 3),
         ints(2, 3, hi=99)))
add(
    "aten._embedding_bag.default",
    case(lambda w, i: A._embedding_bag.default(w, i, BAGS)[0], f(10, 4), ints(6, hi=10)),
    case(lambda w, i: A._embedding_bag.default(w, i, BAG, False, 2)[0], f(10, 4), ints(5, hi=10),
         emulator=True),
    case(lambda w, i: A._embedding_bag.default(w, i, BAGS_LAST, False, 1, False, None, True, 2)[0],
         f(10, 4), ints(4, hi=10)),
)
add(
    "aten.embedding.default",
    case(lambda w, i: A.embedding.default(w, i), f(10, 4), ints(2, 3, hi=10), emulator=True),
    case(
        lambda w, x: A.embedding.default(w, A.arange.start_step(0, x.shape[1])),
        f(10, 4),
        f(2, 6),
        dynamic=True,
    ),
)
add("aten.sym_size.int", case(lambda x: A.mul.Tensor(x, A.sym_size.int(x, 0)), f(3, 2), dynamic=True))

# --- contractions, convolutions, pools ---------------------------------------------------------------------
add(
    "aten.addmm.default",
    case(lambda b, x, w: A.addmm.default(b, x, w), f(5), f(3, 4), f(4, 5), emulator=True),
    case(lambda b, x, w: A.addmm.default(b, x, w, beta=0.5, alpha=2.0), f(3, 5), f(3, 4), f(4, 5)),
)
add("aten.mm.default", case(lambda x, w: A.mm.default(x, w), f(3, 4), f(4, 5)))
add("aten.bmm.default", case(lambda x, w: A.bmm.default(x, w), f(2, 3, 4), f(2, 4, 5)))
add("aten.linear.default", case(lambda x, w, b: A.linear.default(x, w, b), f(2, 3, 4), f(5, 4), f(5)))
add(
    "aten.scaled_dot_product_attention.default",
    case(
        lambda q, k, v, m: A.scaled_dot_product_attention.default(q, k, v, m),
        f(2, 2, 3, 4),
        f(2, 2, 5, 4),
        f(2, 2, 5, 4),
        mask(2, 1, 3, 5),
    ),
    case(
        lambda q, k, v: A.scaled_dot_product_attention.default(q, k, v, is_causal=True, scale=0.3),
        f(1, 2, 4, 8),
        f(1, 2, 4, 8),
        f(1, 2, 4, 8),
    ),
)
add(
    "aten.convolution.default",
    case(
        lambda x, w, b: A.convolution.default(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
        f(2, 3, 6, 6),
        f(4, 3, 3, 3),
        f(4),
        emulator=True,
    ),
    case(
        lambda x, w: A.convolution.default(x, w, None, [2], [0], [2], False, [0], 2), f(1, 4, 9), f(6, 2, 2)
    ),
    case(
        lambda x, w, b: A.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
        f(1, 3, 4, 4),
        f(3, 2, 3, 3),
        f(2),
    ),
)
add(
    "aten.max_pool2d_with_indices.default",
    case(lambda x: A.max_pool2d_with_indices.default(x, [2, 2]), f(2, 3, 6, 6)),
    case(lambda x: A.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1], [1, 1], True), f(1, 2, 7, 7)),
)
add(
    "aten.max_pool3d_with_indices.default",
    case(lambda x: A.max_pool3d_with_indices.default(x, [2, 2, 2]), f(1, 2, 4, 4, 4)),
)
add(
    "aten.adaptive_max_pool2d.default",
    case(lambda x: A.adaptive_max_pool2d.default(x, [2, 3]), f(1, 2, 6, 6)),
)
add(
    "aten.avg_pool1d.default",
    case(lambda x: A.avg_pool1d.default(x, [3], [2], [1], False, False), f(2, 3, 8)),
)
add("aten.adaptive_avg_pool1d.default", case(lambda x: A.adaptive_avg_pool1d.default(x, [3]), f(2, 3, 7)),
    case(lambda x: A.adaptive_avg_pool1d.default(x, [2]), f(3, 8)))
add("aten.avg_pool2d.default", case(lambda x: A.avg_pool2d.default(x, [2, 2]), f(2, 3, 6, 6)),
    case(lambda x: A.avg_pool2d.default(x, [3, 3], [2, 2], [1, 1], True, False), f(1, 2, 7, 7)))
add("aten.avg_pool3d.default", case(lambda x: A.avg_pool3d.default(x, [2, 2, 2]), f(1, 2, 4, 4, 4)))
add(
    "aten._adaptive_avg_pool2d.default",
    case(lambda x: A._adaptive_avg_pool2d.default(x, [1, 1]), f(2, 3, 6, 6)),
    case(lambda x: A._adaptive_avg_pool2d.default(x, [3, 2]), f(1, 2, 7, 5)),
)
add(
    "aten._adaptive_avg_pool3d.default",
    case(lambda x: A._adaptive_avg_pool3d.default(x, [2, 1, 3]), f(1, 2, 4, 3, 5)),
)
add("aten.upsample_nearest2d.vec", case(lambda x: A.upsample_nearest2d.vec(x, [6, 4], None), f(1, 2, 3, 2)))
add(
    "aten.upsample_bilinear2d.vec",
    case(lambda x: A.upsample_bilinear2d.vec(x, [5, 7], False, None), f(1, 2, 3, 4)),
    case(lambda x: A.upsample_bilinear2d.vec(x, None, True, [2.0, 2.0]), f(1, 2, 3, 4)),
)

# --- normalisation ----------------------------------------------------------------------------------
add("aten._softmax.default", case(lambda x: A._softmax.default(x, -1, False), f(3, 5, special=True)),
    case(lambda x: A._softmax.default(x, 0, False), f(3, 5)))
add("aten._log_softmax.default", case(lambda x: A._log_softmax.default(x, 1, False), f(3, 5)))
add(
    "aten.native_layer_norm.default",
    case(lambda x, w, b: A.native_layer_norm.default(x, [4], w, b, 1e-5), f(2, 3, 4), f(4), f(4)),
    case(lambda x: A.native_layer_norm.default(x, [3, 4], None, None, 1e-3), f(2, 3, 4)),
)
add(
    "aten.native_group_norm.default",
    case(lambda x, w, b: A.native_group_norm.default(x, w, b, 2, 4, 6, 2, 1e-5), f(2, 4, 2, 3), f(4), f(4)),
)
add(
    "aten._native_batch_norm_legit_no_training.default",
    case(
        lambda x, w, b, m, v: A._native_batch_norm_legit_no_training.default(x, w, b, m, v, 0.1, 1e-5),
        f(2, 3, 4, 4),
        f(3),
        f(3),
        f(3),
        f(3, lo=0.5, hi=2),
    ),
)
add(
    "aten.native_batch_norm.default",
    case(
        lambda x, m, v: A.native_batch_norm.default(x, None, None, m, v, False, 0.1, 1e-3),
        f(2, 3, 5),
        f(3),
        f(3, lo=0.5),
    ),
)
add(
    "aten._native_batch_norm_legit.default",
    case(
        lambda x, m, v: A._native_batch_norm_legit.default(x, None, None, m, v, False, 0.1, 1e-5),
        f(2, 3, 4),
        f(3),
        f(3, lo=0.5),
    ),
    case(
        lambda x, w, m, v: A._native_batch_norm_legit.default(x, w, None, m, v, True, 0.1, 1e-5),
        f(2, 3, 4),
        f(3),
        f(3),
        f(3, lo=0.5),
    ),
)
add(
    "aten._native_batch_norm_legit.no_stats",
    case(
        lambda x, w, b: A._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
        f(2, 3, 4, 5),
        f(3),
        f(3),
    ),
)
add("aten.native_dropout.default", case(lambda x: A.native_dropout.default(x, 0.5, False), f(3, 4)))

# --- reductions and scans ---------------------------------------------------------------------------
add("aten.sum.dim_IntList", case(lambda x: A.sum.dim_IntList(x, [0, 2], True), f(2, 3, 4)),
    case(lambda x: A.sum.dim_IntList(x, []), f(2, 3)))
add("aten.sum.default", case(lambda x: A.sum.default(x), f(3, 4)),
    case(lambda m: A.sum.default(m), mask(3, 4)))
add("aten.mean.dim", case(lambda x: A.mean.dim(x, [-1]), f(3, 4)))
add("aten.mean.default", case(lambda x: A.mean.default(x), f(3, 4)))
add("aten.var.correction", case(lambda x: A.var.correction(x, [1], correction=0, keepdim=True), f(3, 4)),
    case(lambda x: A.var.correction(x, None), f(3, 4)))
add("aten.var.dim", case(lambda x: A.var.dim(x, [0], False), f(3, 4)))
add("aten.var_mean.correction",
    case(lambda x: A.var_mean.correction(x, [1], correction=0, keepdim=True), f(3, 4)),
    case(lambda x: A.var_mean.correction(x, None), f(3, 4, special=True)))
add(
    "aten.amax.default",
    case(lambda x: A.amax.default(x, [1]), f(3, 4, special=True)),
    case(lambda x: A.amax.default(x), f(3, 4)),
)
add("aten.amin.default", case(lambda x: A.amin.default(x, [0, 1], True), f(3, 4)))
add(
    "aten.max.dim",
    case(lambda x: A.max.dim(x, 1), f(3, 5, special=True)),
    case(lambda x: A.max.dim(x, 0, True), f(3, 5)),
)
add("aten.min.dim", case(lambda x: A.min.dim(x, -1), f(3, 5)))
add("aten.max.default", case(lambda x: A.max.default(x), f(3, 5)))
add("aten.min.default", case(lambda x: A.min.default(x), f(3, 5)))
add(
    "aten.argmax.default",
    case(lambda x: A.argmax.default(x, 1), f(3, 5)),
    case(lambda x: A.argmax.default(x), f(3, 5)),
)
add("aten.argmin.default", case(lambda x: A.argmin.default(x, 0, True), f(3, 5)))
add(
    "aten.linalg_vector_norm.default",
    case(lambda x: A.linalg_vector_norm.default(x, 2, [-1]), f(3, 5)),
    case(lambda x: A.linalg_vector_norm.default(x, 1, [0], True), f(3, 5)),
    case(lambda x: A.linalg_vector_norm.default(x, float("inf")), f(3, 5)),
    case(lambda x: A.linalg_vector_norm.default(x, 3.0, [1]), f(3, 5)),
    case(lambda x: A.linalg_vector_norm.default(x, 0), f(6, special=True)),
)
add("aten.prod.dim_int", case(lambda x: A.prod.dim_int(x, 1), f(3, 5)))
add("aten.prod.default", case(lambda x: A.prod.default(x), f(2, 3)))
add("aten.any.dim", case(lambda m: A.any.dim(m, 1), mask(3, 4)))
add("aten.any.dims", case(lambda x: A.any.dims(x, [0, 1]), f(3, 4, special=True)))
add("aten.any.default", case(lambda m: A.any.default(m), mask(3, 4)))
add("aten.all.dim", case(lambda m: A.all.dim(m, 0), mask(3, 4)))
add("aten.all.default", case(lambda m: A.all.default(m), mask(3, 4)))
add(
    "aten.cumsum.default",
    case(lambda x: A.cumsum.default(x, 1), f(3, 5)),
    # GPT-2's mask: a running count of position steps, computed at run time from positions
    case(
        lambda x: A.cumsum.default(
            A.ne.Scalar(
                A.sub.Tensor(A.arange.start_step(1, x.shape[0] + 1), A.arange.start_step(0, x.shape[0])), 1
            ),
            -1,
        ),
        f(6),
        dynamic=True,
    ),
)
add(
    "aten.topk.default",
    case(lambda x: A.topk.default(x, 2), f(3, 6)),
    case(lambda x: A.topk.default(x, 3, 0, False), f(5, 2)),
)
add(
    "aten.sort.default",
    case(lambda x: A.sort.default(x), f(3, 6)),
    case(lambda x: A.sort.default(x, 0, True), f(5, 2)),
)

# integer inputs fed at run time: compared, cast and used as ids (bools and ints beside each other)
add("aten.eq.Scalar", case(lambda i: A.eq.Scalar(i, 3), ints(3, 4, hi=5)))
add("aten.ne.Scalar", case(lambda i: A.ne.Scalar(i, 0), ints(6, hi=2)))
add("aten.where.self", case(lambda c, x: A.where.self(c, x, ZERO), mask(4), f(3, 4)))
add(
    "aten.masked_fill.Scalar",
    case(lambda x, m: A.masked_fill.Scalar(x, A.eq.Scalar(m, 0), -1e9), f(3, 4), ints(3, 4, hi=2)),
)
