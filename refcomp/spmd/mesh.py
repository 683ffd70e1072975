"""A device mesh: named axes with sizes, devices numbered in row-major order of their coordinates."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ..errors import ShapeError

Spec = tuple  # one entry per tensor dim: None, a mesh axis name, or "axis:k" (see split_entry)


def split_entry(entry) -> tuple[Optional[str], int]:
    """A sharding entry as (mesh axis, blocks). "tp" splits a dim into one block per device; "tp:3"
    views the dim as 3 equal blocks and splits each: device t holds part t of every block. That is
    how a fused (D, 3D) q|k|v weight is laid out at load time so each device holds its heads of q, k
    and v alike, and slicing q, k or v out stays local."""
    if entry is None:
        return None, 1
    axis, _, blocks = entry.partition(":")
    return axis, int(blocks) if blocks else 1


@dataclass(frozen=True)
class Mesh:
    axes: tuple[tuple[str, int], ...]

    def __init__(self, axes: Mapping[str, int]):
        if not isinstance(axes, Mapping) or not axes:
            raise ShapeError(
                f"a Mesh takes a dict of axis name -> size, like {{'dp': 2, 'tp': 4}}, got {axes!r}"
            )
        for name, size in axes.items():
            if not isinstance(name, str) or not name.isidentifier() or not isinstance(size, int) or size < 1:
                raise ShapeError(
                    f"mesh axis {name!r}: the name must be an identifier and the size a positive int, "
                    f"got {size!r}"
                )
        object.__setattr__(self, "axes", tuple(axes.items()))

    def __repr__(self) -> str:
        return "Mesh(" + ", ".join(f"{a}={n}" for a, n in self.axes) + ")"

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.axes)

    @property
    def devices(self) -> int:
        count = 1
        for _, n in self.axes:
            count *= n
        return count

    def coordinates(self) -> list[dict[str, int]]:
        """Each device's coordinate on every axis, in device order."""
        names = [a for a, _ in self.axes]
        return [dict(zip(names, c)) for c in itertools.product(*(range(n) for _, n in self.axes))]

    def groups(self, axis: str) -> list[list[int]]:
        """The devices that talk over `axis`: those sharing every other coordinate, in `axis` order."""
        groups: dict[tuple, list[int]] = {}
        for device, coord in enumerate(self.coordinates()):
            key = tuple(v for a, v in coord.items() if a != axis)
            groups.setdefault(key, []).append(device)
        return list(groups.values())

    def check_spec(self, spec: Optional[Sequence], ndim: int, what: str) -> Spec:
        """A sharding as a tuple of one axis name or None per dim; each mesh axis used at most once."""
        if spec is None:
            return (None,) * ndim
        spec = tuple(spec)
        if len(spec) != ndim:
            raise ShapeError(f"{what}: the sharding {spec!r} names {len(spec)} dims, the tensor has {ndim}")
        for a in spec:
            if a is not None and (
                not isinstance(a, str)
                or (":" in a and not (a.partition(":")[2].isascii() and a.partition(":")[2].isdigit()))
            ):
                raise ShapeError(
                    f"{what}: a sharding entry is None, a mesh axis name or 'axis:blocks', got {a!r}"
                )
        used = [split_entry(a)[0] for a in spec if a is not None]
        unknown = [a for a in used if a not in self.sizes]
        if unknown:
            raise ShapeError(f"{what}: mesh axis {unknown[0]!r} is not one of {[a for a, _ in self.axes]}")
        if len(set(used)) != len(used):
            raise ShapeError(f"{what}: the sharding {spec!r} uses a mesh axis twice")
        return spec
