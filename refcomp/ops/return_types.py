"""PyTorch's named pairs (torch.return_types): `values, indices = x.max(dim=1)` unpacks, and
`.values` / `.indices` read them by name. Indices are float32 positions (refcomp computes no integer
tensors), exact below 2^24."""
from __future__ import annotations

from collections import namedtuple

max = namedtuple("max", ["values", "indices"])
min = namedtuple("min", ["values", "indices"])
cummax = namedtuple("cummax", ["values", "indices"])
cummin = namedtuple("cummin", ["values", "indices"])
sort = namedtuple("sort", ["values", "indices"])
topk = namedtuple("topk", ["values", "indices"])
kthvalue = namedtuple("kthvalue", ["values", "indices"])
median = namedtuple("median", ["values", "indices"])
