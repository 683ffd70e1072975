"""docs/images/serving_decode.png: the explorer page of the decode program of a one-layer GPT-2
(tiny, so the graph stays legible) over the paged pool, in headless Chromium, after clicking the
attention kernel (it looks the K and V pages up itself).

    python scripts/serving_picture.py
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import refcomp as rc  # noqa: E402
from refcomp.serving.kv_cache import PagedKVPool  # noqa: E402
from refcomp.serving.models import random_gpt2  # noqa: E402
from refcomp.serving.programs import step_graph  # noqa: E402
from refcomp.serving.sampling import greedy_graph  # noqa: E402

OUT = ROOT / "docs" / "images" / "serving_decode.png"


def main() -> None:
    model = random_gpt2(layers=1, d_model=32, heads=2, vocab=64, positions=64)
    pool = PagedKVPool(8, 4, 1, 2, 16, scratch_pages=1)
    prog = rc.compile(step_graph(model, pool, 1, greedy_graph), dims_hint={"B": 2, "NP": 2}, cache=False)
    pool.allocate("a", 6), pool.allocate("b", 3)
    feeds = {
        **model.feeds(),
        **pool.feeds(),
        "ids": np.array([[5], [7]], np.int32),
        "positions": np.array([[5], [2]], np.int32),
        "cached": np.array([5, 2], np.float32),
        "lengths": np.array([6, 3], np.float32),
        "block_table": pool.block_tables(["a", "b"]),
        "slots": pool.slot_matrix(["a", "b"], [5, 2], [1, 1], 1),
        "penalty": np.ones(2, np.float32),
        "seen": np.zeros((2, 64), np.float32),
    }
    html = Path(tempfile.mkdtemp()) / "decode.html"
    prog.explorer(html, feeds=feeds)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(html.as_uri())
        pages = lambda n: n.op.name == "Gather" and n.srcs[0].node.op.name == "Scatter"  # noqa: E731
        reader = [k.name for k in prog.kernels if k.kind != "gather" and any(map(pages, k.reads + k.nodes))][
            -1
        ]  # attention (it looks the pages up itself: fuse_gather)
        page.locator(f'section.rc-kernel[data-kernel="{reader}"]').click()
        page.locator(
            ".rc-after g.rc-node.rc-selected"
        ).first.scroll_into_view_if_needed()  # inside the graph's pane
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(OUT), full_page=False)
        browser.close()
    print(f"wrote {OUT.relative_to(ROOT)}; {len(prog.kernels)} kernels; clicked {reader}")


if __name__ == "__main__":
    main()
