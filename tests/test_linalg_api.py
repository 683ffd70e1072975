"""rc.einsum and Tensor.tril / triu against PyTorch on the CPU, and their errors."""
import numpy as np
import pytest

import refcomp as rc
from refcomp.errors import ShapeError
from api_helpers import close, exact, needs_torch, run, torch

EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ji", [(3, 4)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("i,i->", [(6,), (6,)]),
]


@needs_torch
@pytest.mark.parametrize("equation,shapes", EQUATIONS)
def test_einsum_matches_torch(rng, equation, shapes):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = torch.einsum(equation, *[torch.from_numpy(a.astype(np.float64)) for a in arrays]).numpy()
    close(run(lambda *ts: rc.einsum(equation, *ts), *arrays), want, rtol=1e-5, atol=1e-5)


def test_einsum_with_symbolic_dims_and_a_list_of_operands(rng):
    a, b = rc.input("a", ("B", 3)), rc.input("b", (3, "N"))
    out = rc.einsum("bk,kn->bn", [a, b])
    assert tuple(map(str, out.shape)) == ("B", "N")
    x, y = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    close(rc.evaluate(out, {"a": x, "b": y}), x.astype(np.float64) @ y, rtol=1e-5)


@pytest.mark.parametrize("equation,shapes,says", [
    ("ij,jk->ik", [(3, 4), (5, 6)], "letter 'j' has sizes 4 and 5"),
    ("ij->ik", [(3, 4)], "each output letter"),
    ("ijk->i", [(3, 4)], "names 3 axes"),
    ("ij,jk", [(3, 4)], "2 operand term(s) for 1"),
    ("Ij->j", [(3, 4)], "lowercase letters"),
    ("ii->i", [(3, 4)], "letter 'i' repeats with sizes"),
])
def test_einsum_errors_name_the_equation(equation, shapes, says):
    with pytest.raises(ShapeError) as info:
        rc.einsum(equation, *[rc.input(f"x{i}", s) for i, s in enumerate(shapes)])
    assert says in str(info.value) and ("einsum" in str(info.value))


@needs_torch
@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
def test_tril_and_triu_match_torch(rng, diagonal):
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    x[0, 3, 0], x[1, 0, 4] = np.inf, np.nan  # masked-out specials become 0
    t = torch.from_numpy(x)
    exact(run(lambda a: a.tril(diagonal), x), torch.tril(t, diagonal).numpy())
    exact(run(lambda a: a.triu(diagonal), x), torch.triu(t, diagonal).numpy())


def test_triangles_need_two_axes():
    with pytest.raises(ShapeError, match="at least 2 axes"):
        rc.input("v", (4,)).tril()
