"""docs/api.md names every public Tensor method, rc function and rc.nn function, and every entry of it
that has a PyTorch counterpart has registered torch-comparison cases (tests/torch_registry.py)."""
import re
from pathlib import Path

import refcomp as rc
from api_helpers import needs_torch
from torch_registry import all_cases, doc_entries

DOC = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
LISTED = set(re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)", DOC))


def test_every_public_name_is_in_docs_api():
    tensor = {n for n in dir(rc.Tensor) if not n.startswith("_") and callable(getattr(rc.Tensor, n))}
    functions = {n for n in rc.__all__ if callable(getattr(rc, n)) and not n[0].isupper()} - {
        "compile",
        "evaluate",
        "load_program",
    }
    nn = set(rc.nn.__all__)
    missing = sorted((tensor | functions | nn) - LISTED)
    assert not missing, f"docs/api.md does not list {missing}"


def test_the_table_parser_reads_names_operators_and_indexing():
    rows = (
        "## Tensor methods\n| refcomp | PyTorch | differences |\n| --- | --- | --- |\n"
        "| `sum(dim)`, `mean` (`dim`, `keepdim`) | same | |\n| `+ -`, `& \\| ~` | same | |\n"
        "| `x[ids]` | same | |\n| `from_node` | — | internal |\n"
        "## Device meshes\n| refcomp | counterpart | x |\n| `Mesh` | `jax` | |\n"
    )
    assert sorted(doc_entries(rows)) == sorted(
        [
            "Tensor.sum",
            "Tensor.mean",
            "Tensor.+",
            "Tensor.-",
            "Tensor.&",
            "Tensor.|",
            "Tensor.~",
            "Tensor.x[ids]",
        ]
    )


@needs_torch
def test_every_entry_with_a_pytorch_counterpart_has_torch_cases():
    entries, cases = doc_entries(), all_cases()
    assert len(entries) > 250, len(entries)
    missing = sorted(set(entries) - set(cases))
    assert not missing, f"docs/api.md entries without a torch-comparison case: {missing}"
    stale = sorted(set(cases) - set(entries))
    assert not stale, (
        f"cases registered for entries docs/api.md does not have (with a PyTorch counterpart): {stale}"
    )
