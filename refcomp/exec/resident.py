"""Arrays kept on a backend between runs: a model's weights and its KV pool, sent once.

A serving step reads every weight and every layer's key/value pool, and writes a few slots of the
pool. Fed as arrays, all of it would travel to the device and the pool back on every step: GPT-2
small's weights are 500 MB and its pool at 256 pages of 16 another 300 MB, while a decode step's
kernels move a few MB. A `Resident` holds named arrays on one backend. A run given it binds each
Input of those names to the held buffer instead of uploading a feed, and an output whose buffer is a
held one (a Scatter's in-place write into the pool) comes back as an `OnDevice`, not downloaded.

Only float arrays are held: ids stay on the host, where the runner checks them before any launch
(a held table of ids could not be checked without reading it back).
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..errors import FeedError, RefcompError
from ..ops.dtypes import from_storage, storage_numpy_type, to_storage
from .backends import default_backend, get_backend

_HELD = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16"}


class Resident:
    """Named arrays uploaded once to `backend` ("emulator" or "pycuda"; None: the default), read
    and written in place by the runs given this object (Program.run(..., resident=))."""

    def __init__(self, arrays: Mapping[str, object], backend: Optional[str] = None):
        self.backend = default_backend() if backend is None else backend
        if self.backend == "numpy":
            raise RefcompError("Resident: the numpy backend (the reference) keeps no arrays between runs")
        self._be = get_backend(self.backend)
        self._held: dict[str, tuple] = {}  # name -> (buffer, shape, dtype name)
        if not isinstance(arrays, Mapping):
            raise RefcompError(
                f"Resident: arrays must be a dict of name -> array, got {type(arrays).__name__}")
        for name, array in arrays.items():
            self.put(name, array)

    def __contains__(self, name) -> bool:
        return name in self._held

    def __iter__(self):
        return iter(self._held)

    def __repr__(self) -> str:
        return f"Resident({self.backend}: {', '.join(self._held)})"

    def put(self, name: str, array) -> None:
        """Upload `array` as `name` (replacing what was held under that name)."""
        if not isinstance(name, str):
            raise RefcompError(f"Resident: array names are strings, got {name!r}")
        try:
            values = np.asarray(array)
        except (ValueError, TypeError) as exc:  # ragged nested lists, objects NumPy cannot hold
            raise RefcompError(f"Resident: {name!r} is not a rectangular array ({exc})") from None
        dtype = _HELD.get(values.dtype.name)
        if dtype is None:
            raise RefcompError(
                f"Resident: {name!r} has dtype {values.dtype}; only float arrays are held on the device "
                f"(ids stay on the host, where every run checks them)"
            )
        self._held[name] = (self._be.upload(to_storage(values, dtype)), values.shape, dtype)

    def get(self, name: str) -> np.ndarray:
        """The array held as `name`, downloaded."""
        buffer, shape, dtype = self._entry(name)
        return from_storage(self._be.download(buffer, shape, np.dtype(storage_numpy_type(dtype))), dtype)

    def _entry(self, name: str) -> tuple:
        if name not in self._held:
            raise RefcompError(f"Resident: no array named {name!r} is held (held: {sorted(self._held)})")
        return self._held[name]

    def stand_in(self, name: str, node_dtype: str) -> np.ndarray:
        """A zero-copy array of the held one's shape, for binding dims (its values are never read:
        float inputs' values are not checked), after checking the dtype matches the input's."""
        _, shape, dtype = self._entry(name)
        if dtype != node_dtype:
            raise FeedError(
                f"input {name!r} takes {node_dtype}, but the resident array is {dtype} "
                f"(put it as {node_dtype})"
            )
        # (a bfloat16 buffer holds uint16 bits, which binding would take for ints: a float32 stand-in)
        stand_in = np.float32 if dtype == "bfloat16" else storage_numpy_type(dtype)
        return np.broadcast_to(np.zeros((), stand_in), shape)

    def buffer(self, name: str, backend_name: str):
        if backend_name != self.backend:
            raise RefcompError(
                f"Resident: its arrays are on the {self.backend} backend, but this run is on {backend_name}"
            )
        return self._entry(name)[0]

    def holds(self, buffer) -> Optional[str]:
        """The name whose buffer `buffer` is, or None."""
        return next((name for name, (b, _, _) in self._held.items() if b is buffer), None)


class OnDevice:
    """An output a run left in a resident buffer (a Scatter's write into a held table): `numpy()`
    downloads it, as it is now."""

    def __init__(self, resident: Resident, name: str):
        self.resident, self.name = resident, name

    def numpy(self) -> np.ndarray:
        return self.resident.get(self.name)

    def __repr__(self) -> str:
        return f"OnDevice({self.name!r} on {self.resident.backend})"
