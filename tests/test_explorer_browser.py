"""The explorer in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright opens the
HTML of a layer norm and causal attention, checks the graph and the kernel panels, clicks a kernel
and a node and checks the highlighting, takes a screenshot, and fails on any console error.

    REFCOMP_UPDATE_SCREENSHOT=1 pytest tests/test_explorer_browser.py
        # also rewrites docs/images/explorer.png
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc

SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "images" / "explorer.png"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]  # offline: no calls home that the closed network refuses


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium: install Debian's chromium package (.ci/run does, as root)")


@pytest.fixture(scope="module")
def page():
    playwright = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed: pip install -e \".[test]\""
    )
    executable = _chromium()
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser.new_page(viewport={"width": 1400, "height": 1000})
        browser.close()


def _program():
    x = rc.input("x", ("T", 16))
    h = rc.nn.layer_norm(x, rc.input("g", (16,)), rc.input("b", (16,)))
    return rc.compile(rc.nn.scaled_dot_product_attention(h, h, h, is_causal=True), cache=False)


def test_the_explorer_works_in_chromium(page, tmp_path):
    prog = _program()
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((5, 16)).astype(np.float32),
        "g": np.ones(16, np.float32),
        "b": np.zeros(16, np.float32),
    }
    path = tmp_path / "explorer.html"
    prog.explorer(path, feeds=feeds)
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())

    panels = page.locator("section.rc-kernel")
    assert panels.count() == len(prog.kernels)
    assert page.locator(".rc-after g.rc-node").count() >= len(prog.kernels)
    assert page.locator(".rc-before g.rc-node").count() > 0
    assert page.locator("table.rc-trace tr[data-step]").count() == len(prog.search.trace)

    kernel = prog.kernels[2].name  # a kernel panel: its nodes light up
    page.locator(f'section.rc-kernel[data-kernel="{kernel}"]').click()
    selected = page.locator(".rc-after g.rc-node.rc-selected")
    assert selected.count() > 0
    assert all(
        kernel
        in (selected.nth(i).get_attribute("data-kernels") or selected.nth(i).get_attribute("data-kernel"))
        for i in range(selected.count())
    )
    assert page.locator(f'section.rc-kernel.rc-selected[data-kernel="{kernel}"]').count() == 1

    # a node of another kernel (clicking one of the selected kernel's would toggle it off): its panel
    # lights up
    node = page.locator(f'.rc-after g.rc-node[data-kernel]:not([data-kernel="{kernel}"])').first
    owner = node.get_attribute("data-kernel")
    node.click()
    assert page.locator(f'section.rc-kernel.rc-selected[data-kernel="{owner}"]').count() == 1
    assert page.locator("section.rc-kernel.rc-selected").count() >= 1

    shot = tmp_path / "explorer.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 20_000  # a real picture, not a blank page
    if os.environ.get("REFCOMP_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)
    assert errors == [], errors


def _visible(page, box: str, node) -> bool:
    """Whether `node`'s box overlaps the visible part of the graph box `box`."""
    return page.evaluate(
        """([box, node]) => { const b = document.querySelector(box).getBoundingClientRect();
             const n = node.getBoundingClientRect();
             return n.right > b.left && n.left < b.right && n.bottom > b.top && n.top < b.bottom; }""",
        [box, node.element_handle()],
    )


def test_each_graph_opens_on_its_top_row_and_a_kernel_click_scrolls_to_its_nodes(page, tmp_path):
    """A decode step's graphs are thousands of pixels wide, their top rows centred: each box opens on
    its topmost node (not on empty space), and clicking a kernel's panel brings its nodes into view."""
    from refcomp.serving.kv_cache import PagedKVPool
    from refcomp.serving.models import random_gpt2
    from refcomp.serving.programs import step_graph
    from refcomp.serving.sampling import greedy_graph

    model = random_gpt2(layers=1, d_model=32, heads=2, vocab=64, positions=64)
    pool = PagedKVPool(8, 4, 1, 2, 16, scratch_pages=1)
    prog = rc.compile(step_graph(model, pool, 1, greedy_graph), dims_hint={"B": 2, "NP": 2}, cache=False)
    path = tmp_path / "decode.html"
    prog.explorer(path)
    page.goto(path.as_uri())
    for box in (".rc-after", ".rc-before"):
        assert page.evaluate(f"document.querySelector('{box} svg').getAttribute('width') > 1500")
        assert page.evaluate(f"document.querySelector('{box}').scrollLeft") > 0
        tops = page.locator(f"{box} g.rc-node")
        ys = [tops.nth(i).bounding_box()["y"] for i in range(tops.count())]
        assert _visible(page, box, tops.nth(ys.index(min(ys))))
    last = prog.kernels[-1].name  # the argmax: drawn far from the top row
    page.locator(f'section.rc-kernel[data-kernel="{last}"]').click()
    assert _visible(page, ".rc-after", page.locator(".rc-after g.rc-node.rc-selected").first)
