"""Every registered torch-comparison case (tests/torch_registry.py, tests/torch_cases_*.py): the refcomp
call against the same call in PyTorch on the CPU, on the reference; the cases flagged `emulate` again
as one compiled program on the emulator; and each refusal raises a RefcompError that says what differs."""
import numpy as np
import pytest

import refcomp as rc
from api_helpers import needs_torch, torch
from torch_registry import all_cases, compare, feeds_for, flatten, rc_inputs, split_results, torch_inputs

pytestmark = needs_torch
CASES = [c for cases in all_cases().values() for c in cases] if torch is not None else []


def _ours(c, prefix: str = "a"):
    """(the refcomp call's results, the indices of those that are tensors) on fresh inputs."""
    tensor_at, items = split_results(c.ours(*rc_inputs(c, prefix)))
    return items, tensor_at


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_matches_torch_on_the_reference(c):
    arrays = c.arrays()
    if c.refuses:
        with pytest.raises(rc.RefcompError) as raised:
            c.ours(*rc_inputs(c))
        assert all(word in str(raised.value) for word in c.refuses), (c.refuses, str(raised.value))
        return
    items, tensor_at = _ours(c)
    tensors = [items[k] for k in tensor_at]
    values = rc.evaluate(tensors, feeds_for(tensors, arrays), dims=c.dims or None) if tensors else []
    for k, value in zip(tensor_at, values):
        items[k] = value
    compare(c, items, flatten(c.theirs(*torch_inputs(c, arrays))))


def test_a_subset_matches_torch_compiled_on_the_emulator():
    """The flagged cases as one program (search, CUDA, g++, emulator): one compile for them all."""
    chosen = [c for c in CASES if c.emulate]
    assert len(chosen) >= 20
    outputs, feeds, dims, runs = {}, {}, {}, []
    for k, c in enumerate(chosen):
        arrays = c.arrays()
        dims.update(c.dims)
        items, tensor_at = _ours(c, f"c{k}_")
        feeds.update(feeds_for([items[j] for j in tensor_at], arrays, f"c{k}_"))
        outputs.update({f"c{k}_{j}": items[j] for j in tensor_at})
        runs.append((k, c, items, tensor_at, arrays))
    got = rc.compile(outputs).run(feeds, backend="emulator", dims=dims or None)
    for k, c, items, tensor_at, arrays in runs:
        for j in tensor_at:
            items[j] = got[f"c{k}_{j}"]
        compare(c, items, flatten(c.theirs(*torch_inputs(c, arrays))))


def test_every_case_is_called_with_its_inputs():
    """A case's input specs and its refcomp callable agree (a typo would otherwise test nothing)."""
    for c in CASES:
        assert all(isinstance(x, np.ndarray) for x in c.arrays()), c.id
