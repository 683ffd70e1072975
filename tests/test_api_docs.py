"""docs/api.md names every public Tensor method, rc function and rc.nn function."""
import re
from pathlib import Path

import refcomp as rc

DOC = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
LISTED = set(re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)", DOC))


def test_every_public_name_is_in_docs_api():
    tensor = {n for n in dir(rc.Tensor) if not n.startswith("_") and callable(getattr(rc.Tensor, n))}
    functions = {n for n in rc.__all__ if callable(getattr(rc, n)) and not n[0].isupper()} - {"compile", "evaluate", "load_program"}
    nn = set(rc.nn.__all__)
    missing = sorted((tensor | functions | nn) - LISTED)
    assert not missing, f"docs/api.md does not list {missing}"
