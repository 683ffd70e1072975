"""docs/tour.md runs: every ```python block is executed in order in one namespace, and the ```output
block after it must be exactly what it printed, so the tour cannot go stale.

    REFCOMP_TOUR_UPDATE=1 pytest tests/test_tour.py   # rewrite the output blocks from a run
"""
from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

TOUR = Path(__file__).resolve().parent.parent / "docs" / "tour.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```(?P<gap>\s*)(?:```output\n(?P<output>.*?)```)?", re.DOTALL)


def run_tour(text: str) -> list[tuple[re.Match, str]]:
    """(block match, what the block printed) for every python block, run in order."""
    namespace: dict = {"__name__": "tour"}
    results = []
    for number, block in enumerate(BLOCK.finditer(text), start=1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block["code"], f"<tour block {number}>", "exec"), namespace)
        results.append((block, printed.getvalue()))
    return results


def test_the_tour_runs_and_prints_what_it_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # files a block writes land here
    text = TOUR.read_text()
    results = run_tour(text)
    assert len(results) >= 10, "the tour lost its code blocks"
    if os.environ.get("REFCOMP_TOUR_UPDATE"):
        for block, printed in reversed(results):
            if block["output"] is not None:
                start, end = block.span("output")
                text = text[:start] + printed + text[end:]
        TOUR.write_text(text)
        return
    for number, (block, printed) in enumerate(results, start=1):
        if block["output"] is None:
            assert printed == "", (
                f"tour block {number} prints, but the tour shows no output block after it:\n{printed}"
            )
            continue
        assert printed == block["output"], (
            f"tour block {number} now prints:\n{printed}\nbut the tour says:\n"
            f"{block['output']}\n(REFCOMP_TOUR_UPDATE=1 rewrites the outputs)"
        )
