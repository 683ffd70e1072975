"""The memory model (codegen/access.py) checked against the emulator profiler (exec/profile.py).

The model predicts each kernel's warp requests and 32-byte sectors from the index expressions code
generation emitted; the profiler counts them by running the instrumented kernel. On every golden
case, plain and searched, at the case's first binding, every counter must agree (exactly, today; the
issue's bar is 10%). The one known gap: a gather's table reads depend on the ids (data), which the
model takes as distinct rows apart from one another, so for those only the requests are compared.
Then the model must rank alternative kernels for the same work as the profiler does, and the
searched program must never cost more than the plain one under the model.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.codegen.shared_access import memory_counts
from refcomp.search.cost import H200, kernel_cost
from refcomp.exec.profile import model_disagreements
from cuda_cases import CASES, compiled, sliced


@pytest.mark.parametrize("case", sliced())
def test_model_counts_match_the_profiler(case):
    """Plain programs here; the searched golden programs are checked the same way where
    tests/test_profile.py profiles them (cuda_cases.SLICE by default, every case under -m slow).
    Exact today (the issue asks for 10%): any drift means the model and a template disagree."""
    feeds, dims = golden.case_feeds(case, 0)
    prog = compiled(case.name, False, cache=False)
    assert model_disagreements(prog, prog.profile(feeds, dims=dims)) == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_searched_program_never_costs_more_than_plain(case):
    plain, searched = compiled(case.name, False), compiled(case.name, True)
    assert searched.cost.time_s <= plain.cost.time_s * (1 + 1e-9), (
        plain.cost_summary(),
        searched.cost_summary(),
    )


# --- ranking: alternatives for the same work, ordered as the profiler orders them ------------------------
def _sectors(prog, feeds) -> tuple[float, float]:
    """(model, profiler) global sectors of a whole program."""
    measured = prog.profile(feeds)
    model = sum(memory_counts(k, measured.bindings).global_bytes for k in prog.kernels) / 32
    counted = measured.total.global_load_sectors + measured.total.global_store_sectors
    return model, counted


def _alternatives():
    rng = np.random.default_rng(0)
    x = rc.input("x", (64, 96))
    feeds = {"x": rng.standard_normal((64, 96)).astype(np.float32)}
    yield "row sums vs column sums", [x.sum(1), x.sum(0)], feeds
    yield "copy vs transposed copy", [x * 2.0, x.transpose(0, 1) * 2.0], feeds
    yield "broadcast row vs column", [x + x[:1, :], x + x[:, :1]], feeds


@pytest.mark.parametrize(
    "name", ["row sums vs column sums", "copy vs transposed copy", "broadcast row vs column"]
)
def test_model_ranks_alternatives_as_the_profiler_does(name):
    _, outputs, feeds = next(a for a in _alternatives() if a[0] == name)
    pairs = [_sectors(rc.compile(out, search=False), feeds) for out in outputs]
    model_order = np.argsort([m for m, _ in pairs], kind="stable")
    measured_order = np.argsort([c for _, c in pairs], kind="stable")
    assert list(model_order) == list(measured_order), pairs
    assert pairs[0][1] != pairs[1][1], "the alternatives should differ in what they cost"


def test_reduction_strategies_are_priced_by_their_accesses():
    """One thread per row walking a row reads a new sector per lane per step (rows are 96 floats apart);
    a block per row reads the row coalesced. The model prices what it counts."""
    x = rc.input("x", (512, 96))
    prog = rc.compile(x.sum(1), search=False)
    kernel = prog.kernels[0]
    counts = memory_counts(kernel, {})
    assert kernel.launch.mode == "grid_stride"  # 96 < 256: one thread per output
    assert counts.global_load_sectors == 512 // 32 * 96 * 32  # every lane its own sector, every step
    cost = kernel_cost(kernel, kernel.cost, {}, H200, sample=None)
    assert cost.l2_bytes == 32 * (counts.global_load_sectors + counts.global_store_sectors)
    assert cost.bytes <= 4 * (512 * 96 + 512)  # the footprint fits in L2: DRAM sees each byte once


def test_sampled_counts_are_close_to_exact():
    """Programs are priced from a sample of each access's requests; on a big kernel the sample must
    stay within a few percent of the exact count."""
    x = rc.input("x", (128, 500))
    w = rc.input("w", (500, 200))
    prog = rc.compile((x @ w).relu(), search=True, cache=False)
    assert any(k.kind == "matmul" for k in prog.kernels)
    for kernel in prog.kernels:
        exact = memory_counts(kernel, {})
        sampled = memory_counts(kernel, {}, sample=256)
        assert sampled.global_bytes == pytest.approx(exact.global_bytes, rel=0.05), kernel.name


def test_an_index_the_model_cannot_evaluate_falls_back_to_the_graph_estimate():
    import dataclasses

    import sympy

    from refcomp.codegen.access import AccessModelError, global_counts
    from refcomp.codegen.emit import Access
    x = rc.input("x", (64, 96))
    kernel = rc.compile(x * 2.0, search=False, cache=False).kernels[0]
    i = sympy.Symbol("i", integer=True, nonnegative=True)
    odd = dataclasses.replace(kernel.plan, accesses=(Access("in0", 1 / (i + 1), sympy.true, "body"),))
    kernel = dataclasses.replace(kernel, plan=odd)
    with pytest.raises(AccessModelError):
        global_counts(kernel, {})
    assert kernel_cost(kernel, kernel.cost, {}, H200) is kernel.cost


def test_a_retargeted_kernel_is_the_kernel_built_for_its_parameters():
    """The search analyses a kernel once for all values of its template-only parameters
    (codegen.lower.TEMPLATE_ONLY: a matmul's tile and tile loads, a reduction's strategy) and
    retargets that analysis: it must be the kernel code generation builds for those values, launch
    and access plan alike (an attention's streamed rows are padded to whole tiles of each size)."""
    import itertools
    from refcomp.codegen.emit import Unfusable
    from refcomp.codegen.lower import TEMPLATE_ONLY, kernel_for_group, retarget
    from refcomp.search.fusion import group_params
    from refcomp.search.schedule import PARAMS_BY_NAME

    q, k, v = (rc.input(n, ("B", 2, "T", 40)) for n in "qkv")
    x = rc.input("x", ("B", 300))
    outputs = {
        "attention": rc.nn.scaled_dot_product_attention(q, k, v),
        "long": x.sum(axis=-1),
        "short": x.T.sum(axis=-1),
    }
    result = rc.compile(outputs, dims_hint={"B": 2, "T": 96}, cache=False).search
    sched, names = result.schedule, result.graph.names
    fused = lambda n: n.id in sched.inline  # noqa: E731
    checked = set()
    for group in result.groups:
        params = group_params(sched, group)
        only = TEMPLATE_ONLY.get(group.kind, ())
        analysed = kernel_for_group(
            "priced",
            group,
            names,
            fused,
            {**params, **{p: PARAMS_BY_NAME[p].default for p in only}},
            render=False,
        )
        for values in itertools.product(*(PARAMS_BY_NAME[p].choices[group.kind] for p in only)):
            chosen = {**params, **dict(zip(only, values))}
            moved = retarget(analysed, chosen)
            try:
                built = kernel_for_group("priced", group, names, fused, chosen, render=False)
            except Unfusable:  # K in slices for the online kernel, or past a block's threads
                assert moved is None, (group.kind, values)
                checked.add(("refused", analysed.plan.template, values))
                continue
            assert (moved.launch, moved.signature, moved.plan) == (
                built.launch,
                built.signature,
                built.plan,
            ), (group.kind, values)
            checked.add((built.kind, built.plan.template, values))
    assert {(kind, template) for kind, template, _ in checked} >= {
        ("matmul", "softmax_matmul.cu.j2"),
        ("refused", "softmax_matmul.cu.j2"),
        ("reduce", "reduce_thread.cu.j2"),
        ("reduce", "reduce_block.cu.j2"),
    }, checked
