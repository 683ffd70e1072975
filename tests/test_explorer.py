"""The HTML explorer (exec.explorer) and the graph pictures under it (ops.draw), read back with
html.parser: every kernel, node, rewrite step and buffer of a real program must be on the page."""
from __future__ import annotations

import shutil
import subprocess
import sys
import types
from html.parser import HTMLParser

import pytest

import refcomp as rc
from refcomp.codegen.highlight import highlight_cuda
from refcomp.exec.explorer import write_explorer
from refcomp.exec.profile import example_feeds
from refcomp.ops.draw import MAX_NODES, draw_graph

HOSTILE = "<script>alert(1)</script>"
# Built from code "in" a file whose name is markup, so the provenance (file:line) on the page is hostile too.
MODEL = """
x = rc.input(HOSTILE, ("T", 32))
k = rc.input("k", ("T", 32))
v = rc.input("v", ("T", 32))
h = rc.nn.layer_norm(x)
out = rc.nn.scaled_dot_product_attention(h, k, v)
"""
VOID = {"meta", "br", "hr", "img", "input", "link"}


class Element:
    def __init__(self, tag, attrs, parents):
        self.tag, self.attrs, self.parents, self.text = tag, dict(attrs), parents, ""

    @property
    def classes(self) -> set:
        return set((self.attrs.get("class") or "").split())

    def inside(self, css: str) -> bool:
        return any(css in p.classes for p in self.parents)


class Page(HTMLParser):
    """Every element with its attributes, its ancestors and the text inside it (character references
    decoded)."""

    def __init__(self, text: str):
        super().__init__()
        self.elements, self.open = [], []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        element = Element(tag, attrs, list(self.open))
        self.elements.append(element)
        if tag not in VOID:
            self.open.append(element)

    def handle_startendtag(self, tag, attrs):
        self.elements.append(Element(tag, attrs, list(self.open)))

    def handle_endtag(self, tag):
        assert self.open and self.open[-1].tag == tag, (
            f"</{tag}> closes {self.open[-1].tag if self.open else 'nothing'}"
        )
        self.open.pop()

    def handle_data(self, data):
        for element in self.open:
            element.text += data

    def find(self, css: str, tag: str | None = None) -> list[Element]:
        return [e for e in self.elements if css in e.classes and (tag is None or e.tag == tag)]


def build(where: str = "<img src=x onerror=alert(2)>.py"):
    scope = {"rc": rc, "HOSTILE": HOSTILE}
    exec(compile(MODEL, where, "exec"), scope)
    return scope["out"]


@pytest.fixture(scope="module")
def program():
    return rc.compile(build(), cache=False)


@pytest.fixture(scope="module")
def html(program):
    return write_explorer(program)


@pytest.fixture(scope="module")
def page(html):
    return Page(html)


def test_the_page_is_well_formed_and_self_contained(html, page):
    assert html.startswith("<!DOCTYPE html>") and not page.open
    assert "http://" not in html and "https://" not in html
    assert [e.tag for e in page.elements].count("script") == 1  # the explorer's own, inline
    assert not [e for e in page.elements if e.tag in ("link", "img", "iframe") or "src" in e.attrs]


def test_every_kernel_has_a_panel(program, page):
    panels = page.find("rc-kernel", "section")
    assert [p.attrs["data-kernel"] for p in panels] == [k.name for k in program.kernels]
    for kernel, panel in zip(program.kernels, panels):
        assert kernel.kind in panel.text and str(kernel.launch) in panel.text
        assert all(op in panel.text for op in kernel.ops)
        assert f"{kernel.cost.bytes:,} B" in panel.text and f"{kernel.cost.time_s * 1e6:.2f} us" in panel.text
        code = [e for e in page.elements if e.tag == "code" and panel in e.parents]
        assert (
            len(code) == 1 and code[0].text == kernel.source
        )  # highlighted, escaped, and every character kept


def test_the_compiled_graph_has_every_computed_node_coloured_by_its_kernel(program, page):
    drawn = {int(e.attrs["data-node"]): e for e in page.find("rc-node", "g") if e.inside("rc-after")}
    computing = {}
    for kernel in program.kernels:
        for node in kernel.nodes:
            computing.setdefault(node.id, set()).add(kernel.name)
    for node in program._nodes:
        if node.op.kind == "leaf":
            continue
        element = drawn[program.names.numbers[node.id]]
        assert element.attrs["data-kernel"] in computing[node.id]
        assert set(element.attrs["data-kernels"].split()) == computing[node.id]
        assert program.names.label(node) in element.text
    writers = {k.output.id: k.name for k in program.kernels}
    for (
        node_id,
        name,
    ) in writers.items():  # a node a kernel writes is that kernel's, though others recompute it
        assert drawn[program.names.numbers[node_id]].attrs["data-kernel"] == name


def test_the_user_graph_is_drawn_and_matched_to_kernels(program, page):
    drawn = [e for e in page.find("rc-node", "g") if e.inside("rc-before")]
    assert len(drawn) == sum(1 for n in program._user_nodes if not n.op.literal)
    names = {k.name for k in program.kernels}
    assert all(e.attrs["data-kernel"] in names for e in drawn if "data-kernel" in e.attrs)
    assert sum("data-kernel" in e.attrs for e in drawn) > len(drawn) // 2  # most survive the rules' rebuilds


def test_the_trace_lists_every_rule_in_order_with_one_bar_per_step(program, page):
    steps = program.search.trace
    rows = [e for e in page.elements if e.tag == "tr" and e.inside("rc-trace") and "data-step" in e.attrs]
    cells = [[c.text for c in page.elements if c.tag == "td" and row in c.parents] for row in rows]
    assert [c[1] for c in cells] == [s.rule for s in steps]
    assert [c[3] for c in cells] == [f"{s.cost_s * 1e6:.2f}" for s in steps]
    bars = page.find("rc-bar", "rect")
    assert [int(b.attrs["data-step"]) for b in bars] == list(range(len(steps)))
    heights = [int(b.attrs["height"]) for b in bars]
    assert heights.index(max(heights)) == [s.cost_s for s in steps].index(max(s.cost_s for s in steps))


@pytest.mark.parametrize("which", ["attention", "conv"])
def test_the_trace_names_the_opening_and_lists_the_moves_left_undone(program, page, which):
    """The attention leaves no move; a direct conv + relu + pool layer leaves one (see
    test_search_quality)."""
    from refcomp.search.alternatives import untaken_moves
    if which == "conv":
        from test_search_quality import direct_conv_layer
        program = rc.compile(direct_conv_layer(), cache=False)
        page = Page(write_explorer(program))
    trace = next(e for e in page.elements if e.attrs.get("id") == "trace")
    assert f"The '{program.search.opening}' opening found this schedule." in trace.text
    chosen, moves = untaken_moves(program.search)
    rows = [e for e in page.elements if e.tag == "tr" and e.inside("rc-untaken") and not e.inside("rc-trace")]
    cells = [
        [c.text for c in page.elements if c.tag == "td" and row in c.parents] for row in rows[1:]
    ]  # after the header
    assert cells == [
        [
            m.rule,
            m.where,
            str(m.kernels),
            f"{m.bytes - chosen.bytes:+,}",
            f"{(m.time_s - chosen.time_s) * 1e6:+.2f}",
        ]
        for m in moves
    ]
    assert bool(moves) == (which == "conv")
    if not moves:
        assert "Moves left undone: none." in trace.text


def test_the_memory_timeline_has_one_bar_per_intermediate_buffer(program, page):
    plan = program.memory_plan(program.cost_bindings)
    bars = page.find("rc-buffer", "g")
    assert sorted(int(b.attrs["data-node"]) for b in bars) == sorted(
        program.names.numbers[i] for i in plan.slot_of
    )
    writer = {program.names.numbers[k.output.id]: k.name for k in program.kernels}
    for bar in bars:
        assert int(bar.attrs["data-slot"]) == plan.slot_of[next(i for i, n in program.names.numbers.items()
                                                                 if n == int(bar.attrs["data-node"]))]
        assert bar.attrs["data-kernels"].split()[0] == writer[int(bar.attrs["data-node"])]


def test_user_strings_appear_only_escaped(html, page):
    assert HOSTILE not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;.py" in html  # the provenance of the user's ops
    assert any(HOSTILE in e.text for e in page.find("rc-node", "g"))  # shown, as text


def test_the_page_is_deterministic(program, html, tmp_path):
    assert write_explorer(program) == html
    assert (
        write_explorer(program, tmp_path / "x.html")
        == html
        == (tmp_path / "x.html").read_text(encoding="utf-8")
    )
    again = write_explorer(rc.compile(build(), cache=False))  # the same graph built and searched again
    # (but codegen.memory.plan_memory frees slots in the order of a set of node ids, so which slot a
    # buffer reuses may change with the process-wide ids: compare the page up to the memory plan)
    assert again[:again.index('id="memory"')] == html[:html.index('id="memory"')]


def test_program_explorer_with_feeds_shows_the_profile(tmp_path):
    x = rc.input("x", ("B", 64))
    prog = rc.compile(x.softmax(axis=-1), cache=False)
    feeds, _ = example_feeds(prog)
    text = prog.explorer(tmp_path / "softmax.html", feeds=feeds)
    assert (tmp_path / "softmax.html").read_text(encoding="utf-8") == text
    page = Page(text)
    profile = prog.profile(feeds)
    for panel, got in zip(page.find("rc-kernel", "section"), profile.kernels):
        counters = [e for e in page.find("rc-counters", "table") if panel in e.parents]
        assert len(counters) == 1 and "global load requests" in counters[0].text
        assert f"{got.counters.global_load_requests:,}" in counters[0].text


def test_a_program_without_search_has_no_trace():
    x = rc.input("x", (4, 8))
    page = Page(rc.compile((x * 2.0).exp(), search=False, cache=False).explorer())
    assert not page.find("rc-bar") and page.find("rc-kernel", "section")
    assert "not searched" in next(e for e in page.elements if e.attrs.get("id") == "trace").text


def test_jupyter_views_show_svg(program):
    assert "<svg" in build()._repr_html_() and "&lt;Tensor" in build()._repr_html_()
    view = program._repr_html_()
    assert "<svg" in view and all(k.name in view for k in program.kernels) and HOSTILE not in view


def chain(depth: int):
    x = rc.input("x", (4,))
    for _ in range(depth):
        x = x * 2.0
    return x


def test_the_fallback_layout_draws_a_3000_deep_chain_without_recursion():
    x = chain(3000)
    svg = draw_graph([x.node], max_nodes=None, graphviz=False)
    page = Page(svg)
    assert len(page.find("rc-node", "g")) == 3001 and len(page.find("rc-edge", "g")) == 3000
    capped = Page(draw_graph([x.node], graphviz=False))
    assert len(capped.find("rc-node", "g")) == MAX_NODES
    assert f"showing the first {MAX_NODES} of 3,001 nodes" in capped.find("rc-note")[0].text
    assert draw_graph([x.node], graphviz=False) == draw_graph([x.node], graphviz=False)


def test_without_dot_the_fallback_is_used(monkeypatch):
    fake = types.ModuleType("graphviz")
    fake.Source = lambda text: pytest.fail("Graphviz was asked although dot is missing")
    monkeypatch.setitem(sys.modules, "graphviz", fake)
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)
    x = chain(3)
    assert draw_graph([x.node]) == draw_graph([x.node], graphviz=False)


DOT_SVG = """<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<!-- Generated by graphviz -->
<svg width="62pt" height="116pt" viewBox="0.00 0.00 62.00 116.00" xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">
<g id="graph0" class="graph" transform="scale(1 1)">
<g id="rc-n0" class="node"><title>n0</title><text>input 'x'</text></g>
<g id="edge1" class="edge"><title>n0&#45;&gt;n1</title></g>
<g id="rc-n1" class="node"><title>n1</title><text>Mul#1</text></g>
</g>
</svg>
"""


def test_graphviz_output_gets_the_same_hooks(monkeypatch):
    """dot's SVG (a canned one here) is inlined with our classes and data attributes, and no ids or
    namespaces."""
    seen = []
    fake = types.ModuleType("graphviz")
    fake.Source = lambda text: (
        seen.append(text) or types.SimpleNamespace(pipe=lambda format: DOT_SVG.encode())
    )
    monkeypatch.setitem(sys.modules, "graphviz", fake)
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: "/usr/bin/dot")
    x = rc.input("x", (4,))
    y = x * x
    svg = draw_graph([y.node], ["k0_mul"], {y.node.id: ["k0_mul"]})
    assert "n0 -> n1" in seen[0] and 'label="Mul#1\\n(4,)"' in seen[0]
    assert svg.startswith('<svg class="rc-graph"') and "http" not in svg and " id=" not in svg
    nodes = Page(svg).find("rc-node", "g")
    assert [(n.attrs["data-node"], n.attrs.get("data-kernel")) for n in nodes] == [
        ("0", None),
        ("1", "k0_mul"),
    ]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_layout_when_installed(program):
    pytest.importorskip("graphviz")
    svg = draw_graph(program.output_nodes, [k.name for k in program.kernels])
    assert len(Page(svg).find("rc-node", "g")) == sum(1 for n in program._nodes if not n.op.literal)


def test_cuda_highlighting_escapes_everything():
    out = highlight_cuda(
        '// a < b\n#include <x>\nconst float* __restrict__ in0; y = 1.5f + 2;\n__syncthreads(); s = "<&>";'
    )
    assert (
        '<span class="hl-comment">// a &lt; b</span>' in out
        and '<span class="hl-preproc">#include &lt;x&gt;</span>' in out
    )
    assert '<span class="hl-keyword">const</span> <span class="hl-type">float</span>*' in out
    assert (
        '<span class="hl-number">1.5f</span>' in out
        and '<span class="hl-builtin">__syncthreads</span>' in out
    )
    assert '<span class="hl-string">&quot;&lt;&amp;&gt;&quot;</span>' in out


@pytest.mark.skipif(shutil.which("node") is None, reason="node.js is not installed")
def test_the_script_parses(html, tmp_path):
    script = html.split("<script>", 1)[1].split("</script>", 1)[0]
    (tmp_path / "explorer.js").write_text(script)
    subprocess.run(["node", "--check", str(tmp_path / "explorer.js")], check=True)


def test_dims_without_feeds_is_refused(program):
    with pytest.raises(rc.RefcompError, match="pass feeds too"):
        program.explorer(dims={"T": 8})


def test_an_unwritable_path_is_a_refcomp_error(tmp_path):
    import refcomp as rc
    prog = rc.compile(rc.input("x", (4,)).exp(), cache=False)
    with pytest.raises(rc.RefcompError, match="cannot write the explorer page"):
        prog.explorer(tmp_path / "no" / "such" / "dir" / "page.html")
