"""Every row of refcomp's ATen table against PyTorch, and the table in docs/torch.md.

Each case (tests/torch_export_cases*.py) is a tiny module calling the op through torch.ops.aten,
exported without decompositions so that the program holds that very op, imported, evaluated by
the reference (a few also compiled and run on the emulator) and compared with PyTorch's result:
floats to 1e-5 relative, integers and booleans exactly. A row with no case fails.
"""
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.export frontend tests need PyTorch")

import torch_export_cases  # noqa: E402
import torch_export_cases_nn  # noqa: E402,F401  (adds its cases to CASES)

import refcomp as rc  # noqa: E402
from refcomp.frontends.aten_table import NOT_MAPPED, ROWS, TABLE, markdown, op_name  # noqa: E402

CASES = torch_export_cases.CASES
PARAMS = [
    pytest.param(row.name, k, id=f"{row.name}-{k}")
    for row in ROWS
    for k in range(max(1, len(CASES.get(row.name, []))))
]


class Calls(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *inputs):
        return self.fn(*inputs)


def exported(c):
    """The case's module as torch.export gives it, before decompositions (the first dims of the dynamic
    inputs, all or those listed, Dim.AUTO)."""
    which = range(len(c.inputs)) if c.dynamic is True else c.dynamic or ()
    specs = {"inputs": tuple({0: torch.export.Dim.AUTO} if t.dim() and k in which else None
                             for k, t in enumerate(c.inputs))} if which else None
    return torch.export.export(Calls(c.fn), c.inputs, dynamic_shapes=specs)


def check(got: dict, want, c) -> None:
    want = [want] if isinstance(want, torch.Tensor) else [w for w in want]
    assert len(got) == len(want), (list(got), len(want))
    for (name, g), w in zip(got.items(), want):
        w = w.detach()
        w = w.float() if w.dtype == torch.bfloat16 else w
        w = w.numpy()
        assert g.shape == w.shape, (name, g.shape, w.shape)
        if (
            w.dtype.kind == "f"
        ):  # atol in units of the output's scale: a sum's rounding is relative to its terms
            scale = max(1.0, float(np.abs(w[np.isfinite(w)]).max(initial=0.0)))
            np.testing.assert_allclose(
                np.asarray(g, np.float64),
                w.astype(np.float64),
                rtol=c.rtol,
                atol=c.atol * scale,
                err_msg=name,
            )
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)
            assert g.dtype == w.dtype, (name, g.dtype, w.dtype)


@pytest.mark.parametrize("name,k", PARAMS)
def test_row_matches_torch(name, k):
    cases = CASES.get(name, [])
    assert cases, (
        f"{name} has a row in the ATen table but no comparison with PyTorch in tests/torch_export_cases*.py"
    )
    c = cases[k]
    ep = exported(c)
    assert name in {op_name(n.target) for n in ep.graph.nodes if n.op == "call_function"}, (
        f"the case exports "
        f"{sorted({op_name(n.target) for n in ep.graph.nodes if n.op == 'call_function'})}, not {name}"
    )
    m = rc.torch.import_program(ep)
    feeds = dict(zip(m.input_types, c.inputs))
    with torch.no_grad():
        want = c.fn(*c.inputs)
    check(m.evaluate(feeds), want, c)
    if c.emulator:
        check(m.run(feeds, backend="emulator"), want, c)


def test_every_case_names_a_row():
    names = {row.name for row in ROWS}
    assert set(CASES) <= names, sorted(set(CASES) - names)


def test_every_core_aten_op_has_a_row_or_a_reason():
    """torch's Core ATen opset (the ops tagged core): each is imported or listed in NOT_MAPPED with why."""
    core = set()
    for (
        schema
    ) in torch._C._jit_get_all_schemas():  # every registered op (dir(torch.ops.aten) lists only those loaded)
        if schema.name.startswith("aten::"):
            name, overload = schema.name[len("aten::"):], schema.overload_name or "default"
            if torch.Tag.core in getattr(getattr(torch.ops.aten, name), overload).tags:
                core.add(f"aten.{name}.{overload}")
    assert len(core) > 150
    assert not core - set(TABLE) - set(NOT_MAPPED), sorted(core - set(TABLE) - set(NOT_MAPPED))
    assert not set(TABLE) & set(NOT_MAPPED)


def test_docs_show_the_table():
    text = (Path(__file__).resolve().parents[1] / "docs" / "torch.md").read_text()
    assert markdown() in text, "docs/torch.md's op table differs from refcomp.frontends.aten_table.markdown()"
