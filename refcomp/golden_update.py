"""Regenerating the golden data: `refcomp golden update`.

Each case's expected outputs are evaluated again in float64 and written only where they changed;
a binding whose outputs disagree with the case's independent oracle is refused (not written), and
the result says, file by file, what is new, changed, unchanged, refused or removed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from .golden import (
    FLOAT64_TOLERANCE,
    GoldenCase,
    as_stored,
    case_tolerance,
    compare,
    data_path,
    evaluate_case,
    load_cases,
    make_feeds,
    read_data,
    run_oracle,
    same_array,
    select,
    stored_files,
    write_data,
)


@dataclass
class UpdateResult:
    new: list[str] = field(default_factory=list)  # case names with no data before
    removed: list[str] = field(default_factory=list)  # data files that belong to no case (deleted)
    changed: list[tuple[str, list[str]]] = field(default_factory=list)  # "<name>[i]" and what changed
    unchanged: int = 0  # data files left as they were
    refused: list[tuple[str, list[str]]] = field(
        default_factory=list
    )  # disagree with the oracle: not written

    @property
    def ok(self) -> bool:
        return not self.refused

    def summary(self) -> str:
        lines = [
            f"golden update: {len(self.new)} new, {len(self.removed)} removed, {len(self.changed)} changed, "
            f"{self.unchanged} unchanged"
            + (f", {len(self.refused)} REFUSED (oracle disagrees)" if self.refused else "")
        ]
        lines += [f"  new      {name}" for name in self.new]
        lines += [f"  removed  {name}" for name in self.removed]
        for name, what in self.changed:
            lines.append(f"  changed  {name}: " + "; ".join(what))
        for name, what in self.refused:
            lines.append(f"  REFUSED  {name}: " + "; ".join(what))
        return "\n".join(lines)


def update(names: Optional[Iterable[str]] = None, dry_run: bool = False, force: bool = False,
           cases: Optional[Sequence[GoldenCase]] = None) -> str:
    """Regenerate the golden data and return a summary of what changed (see `update_result`)."""
    return update_result(names, dry_run, force, cases).summary()


def update_result(names: Optional[Iterable[str]] = None, dry_run: bool = False, force: bool = False,
                  cases: Optional[Sequence[GoldenCase]] = None) -> UpdateResult:
    """Regenerate every (or the named) case's data files, writing only those whose content changed.

    Expected outputs come from rc.evaluate in float64; a binding whose outputs disagree with the
    case's oracle beyond ORACLE_TOLERANCE is not written (unless `force`). Without `names`, data
    files that belong to no case are deleted.
    """
    cases = select(load_cases() if cases is None else cases, names)
    result = UpdateResult()
    for case in cases:
        existed = False
        new_files = []
        for i, binding in enumerate(case.bindings):
            path = data_path(case, i)
            feeds = make_feeds(case, i)
            dims = {k: int(v) for k, v in binding.items()}
            outputs = {k: as_stored(v) for k, v in evaluate_case(case, feeds, dims, "float64").items()}
            disagreement = compare(outputs, run_oracle(case, feeds), case_tolerance(case, "oracle"))
            label = f"{case.name}[{i}]"
            if disagreement and not force:
                result.refused.append((label, disagreement))
                continue
            if path.exists():
                existed = True
                what = _differences(read_data(path), feeds, dims, outputs)
                if not what:
                    result.unchanged += 1
                    continue
                result.changed.append((label, what))
            else:
                new_files.append(label)
            if not dry_run:
                write_data(path, feeds, dims, outputs)
        if new_files:
            if existed:
                result.changed.extend((label, ["new binding"]) for label in new_files)
            else:
                result.new.append(case.name + (f" ({len(new_files)} bindings)" if len(new_files) > 1 else ""))
    if not names:
        known = {data_path(c, i).name for c in cases for i in range(len(c.bindings))}
        for path in stored_files():
            if path.name not in known:
                result.removed.append(path.stem)
                if not dry_run:
                    path.unlink()
    return result


def _differences(old: Mapping, feeds: Mapping, dims: Mapping, outputs: Mapping) -> list[str]:
    what = []
    if old["dims"] != dict(dims):
        what.append(f"binding {old['dims']} -> {dict(dims)}")
    if set(old["in"]) != set(feeds):
        what.append(f"inputs {sorted(old['in'])} -> {sorted(feeds)}")
    else:
        changed = [k for k in feeds if not same_array(old["in"][k], feeds[k])]
        if changed:
            what.append("inputs changed: " + ", ".join(changed))
    for name in sorted(set(old["out"]) - set(outputs)):
        what.append(f"output {name} removed")
    for name in outputs:
        if name not in old["out"]:
            what.append(f"output {name} added")
            continue
        a, b = old["out"][name], outputs[name]
        if a.shape != b.shape:
            what.append(f"output {name} shape {a.shape} -> {b.shape}")
        elif a.dtype != b.dtype or not _same_outputs(a, b):
            with np.errstate(all="ignore"):
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                diff = np.where(np.isnan(a64) & np.isnan(b64), 0.0, np.abs(a64 - b64))
            what.append(f"output {name} max abs diff {float(np.nanmax(diff)) if diff.size else 0.0:.3g}")
    return what


def _same_outputs(stored: np.ndarray, fresh: np.ndarray) -> bool:
    """Equal within FLOAT64_TOLERANCE (NaNs where NaNs were): the float64 reference sums in the order
    NumPy's SIMD loops and BLAS choose for the CPU at hand (AVX2 or AVX-512 lanes), so another
    machine evaluates the same case a few ulp apart (1.8e-15 on a tiny decoder), which is not a
    change of the case; `golden check` holds the reference to the same tolerance."""
    if np.array_equal(stored, fresh, equal_nan=True):
        return True
    with np.errstate(all="ignore"):
        return bool(np.allclose(fresh, stored, equal_nan=True, **FLOAT64_TOLERANCE))
