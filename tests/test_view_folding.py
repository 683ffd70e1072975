"""View-stack folding: movement ops keep the stack one view where the algebra allows (and two where
it does not), reading what NumPy reads; views hash the same in a fresh process.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp.symbolic.view import ViewStack


def _values(shape) -> np.ndarray:
    """Distinct positive values, so a wrong index or a lost mask shows as a mismatch."""
    return (np.arange(int(np.prod(shape)), dtype=np.float32) + 1).reshape(shape)


def _depth(t) -> int:
    return len(t.views.views)


@pytest.mark.parametrize("build, depth", [
    (lambda x: x.permute(2, 0, 1).permute(1, 2, 0), 1),
    (lambda x: x.T.T, 1),
    (lambda x: x[1:, ::2, 3], 1),
    (lambda x: x[:, ::-1], 1),
    (lambda x: x.reshape(6, 4), 1),
    (lambda x: x.reshape(-1), 1),
    (lambda x: x.reshape(2, 3, 2, 2), 1),
    (lambda x: x.unsqueeze(1).squeeze(1), 1),
    (lambda x: x[None, :, None], 1),
    (lambda x: x.flip(0).flip(2), 1),
    (lambda x: x.permute(1, 0, 2).reshape(3, 2, 2, 2), 1),  # axis 2 is untouched: splits without a copy
    (lambda x: x[:, 0:1].expand(2, 5, 4), 1),
    (lambda x: x.pad([(1, 1), (0, 0), (2, 0)]), 1),
    (lambda x: x.pad([(1, 0), (0, 0), (0, 0)])[1:], 1),
    (lambda x: x.permute(1, 0, 2).reshape(6, 4), 2),  # merging axes that are not adjacent in memory
    (lambda x: x.T.reshape(-1), 2),
    (lambda x: x[:, ::2].reshape(4, 4), 2),  # merging a stepped axis with its neighbour
    (lambda x: x.pad([(1, 0), (0, 0), (0, 0)]).reshape(9, 4), 2),  # a masked view cannot fold a reshape
    (lambda x: x.contiguous().reshape(6, 4), 1),
])
def test_view_stack_folding(build, depth):
    x = rc.input("x", (2, 3, 4))
    out = build(x)
    assert _depth(out) == depth, out.views
    expected = build_np(build, _values((2, 3, 4)))
    np.testing.assert_array_equal(rc.evaluate(out, {"x": _values((2, 3, 4))}), expected)


def build_np(build, array):
    """Run a lambda written against the Tensor API on a NumPy array through a tiny adapter."""
    class A:
        def __init__(self, a):
            self.a = a

        def permute(self, *order):
            return A(np.transpose(self.a, order))

        @property
        def T(self):
            return A(self.a.T)

        def __getitem__(self, index):
            return A(self.a[index])

        def reshape(self, *shape):
            return A(self.a.reshape(shape))

        def unsqueeze(self, axis):
            return A(np.expand_dims(self.a, axis))

        def squeeze(self, axis):
            return A(np.squeeze(self.a, axis))

        def flip(self, axis):
            return A(np.flip(self.a, axis))

        def expand(self, *shape):
            return A(np.broadcast_to(self.a, shape))

        def pad(self, widths):
            return A(np.pad(self.a, widths))

        def contiguous(self):
            return A(np.ascontiguousarray(self.a))

    return build(A(array)).a


def test_folding_with_symbolic_dims():
    x = rc.input("x", ("B", "T", 8))
    assert _depth(x.reshape(x.shape[0] * x.shape[1], 8)) == 1
    assert _depth(x.reshape(x.shape[0], x.shape[1], 2, 4)) == 1
    assert _depth(x.permute(1, 0, 2).permute(1, 0, 2)) == 1
    assert _depth(x[:, 1:]) == 1
    assert _depth(x.permute(1, 0, 2).reshape(-1, 8)) == 2
    assert x.reshape(x.shape[0] * x.shape[1], 8).views.top.is_contiguous
    stack = x.views
    assert stack.is_identity and isinstance(stack, ViewStack)
    assert not x.T.views.is_identity


def test_a_view_pickled_in_one_process_hashes_as_a_fresh_one_in_another(tmp_path):
    """Views cache their hash; SymPy's hashes differ between processes, so the cache stays behind."""
    import os
    import pickle
    import subprocess
    import sys
    from refcomp.symbolic.dims import symbol
    stack = ViewStack.of_buffer((symbol("T"), 4)).permute((1, 0))
    assert stack in {stack}  # its hash (and its views') now cached in this process
    path = tmp_path / "stack.pickle"
    path.write_bytes(pickle.dumps(stack))
    code = (
        "import pickle, sys\nfrom refcomp.symbolic.dims import symbol\n"
        "from refcomp.symbolic.view import ViewStack\n"
        "loaded = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "fresh = ViewStack.of_buffer((symbol('T'), 4)).permute((1, 0))\n"
        "print(loaded == fresh, loaded in {fresh}, loaded.views[0] in {fresh.views[0]})"
    )
    seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONHASHSEED=seed), timeout=120)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr
