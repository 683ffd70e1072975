"""torch.compile(model, backend="refcomp"): dynamo's graphs lowered to Core ATen by AOTAutograd,
imported by the torch.export frontend's Importer, compiled once per graph, against eager PyTorch
(refcomp/torch_backend.py)."""

import importlib.metadata
import tomllib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.compile backend tests need PyTorch")
from torch import nn  # noqa: E402

from refcomp.errors import RefcompError  # noqa: E402
from refcomp.torch_backend import refcomp_backend, stats  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FAST = {"search": False}  # the search is rc.compile's, tested elsewhere; these tests check the lowering


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def close(got, want, tol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
    assert err < tol, err


def compiles(fn):
    """The refcomp compiles (rc.compile calls) `fn` causes."""
    before = stats["compiles"]
    fn()
    return stats["compiles"] - before


def test_mlp_under_no_grad_and_plain_forward():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4), nn.LogSoftmax(-1)).eval()
    compiled = torch.compile(net, backend=refcomp_backend, options={"backend": "emulator", **FAST})
    x = torch.randn(3, 8)
    with torch.no_grad():
        close(compiled(x), net(x))
    close(compiled(x).detach(), net(x).detach())  # grad enabled: AOTAutograd's forward graph, compiled too


def test_dynamic_batch_compiles_once_for_every_size():
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    compiled = torch.compile(
        net, backend=refcomp_backend, dynamic=True, options={"backend": "emulator", **FAST}
    )

    def run():
        with torch.no_grad():
            for b in (3, 5, 9):
                x = torch.randn(b, 8)
                close(compiled(x), net(x))
    assert compiles(run) == 1


def test_a_new_size_recompiles_once_dynamic():
    """dynamic=None (torch's default): the first size is static, a second one makes dynamo trace a dynamic
    graph, which then serves every later size."""
    torch.manual_seed(2)
    net = nn.Linear(4, 3).eval()
    compiled = torch.compile(net, backend=refcomp_backend, options={"backend": "emulator", **FAST})

    def run():
        with torch.no_grad():
            for b in (2, 3, 4, 6):
                x = torch.randn(b, 4)
                close(compiled(x), net(x))
    assert compiles(run) == 2


def test_transformer_encoder_layer():
    torch.manual_seed(3)
    net = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    compiled = torch.compile(
        net, backend=refcomp_backend, dynamic=True, options={"backend": "emulator", **FAST}
    )
    for b in (2, 3):
        x = torch.randn(b, 5, 16)
        close(compiled(x).detach(), net(x).detach())  # grad enabled: nn.MultiheadAttention's ATen ops
    # under no_grad an eval layer takes torch's fused fast path (aten._transformer_encoder_layer_fwd, which
    # no decomposition lowers): refused by name unless the fast path is off
    with torch.no_grad():
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="_transformer_encoder_layer_fwd"):
            compiled(x)
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            close(compiled(x), net(x))
        finally:
            torch.backends.mha.set_fastpath_enabled(True)


def test_cnn_with_batch_norm_and_pools():
    torch.manual_seed(4)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, stride=2, groups=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(8, 10)).eval()
    with torch.no_grad():
        net[1].running_mean.uniform_(-1, 1), net[1].running_var.uniform_(0.5, 2)
        x = torch.randn(2, 3, 12, 12)
        compiled = torch.compile(net, backend=refcomp_backend, options={"backend": "emulator", **FAST})
        close(compiled(x), net(x))


class Breaks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 2)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        print("a graph break")  # dynamo ends the graph here and starts another after it
        scale = h.abs().max().item()  # .item() breaks the graph too (capture_scalar_outputs is off)
        return self.b(h / scale)


def test_graph_breaks_compile_each_piece(capsys):
    torch.manual_seed(5)
    net = Breaks().eval()
    x = torch.randn(4, 6)
    compiled = torch.compile(net, backend=refcomp_backend, options={"backend": "emulator", **FAST})
    with torch.no_grad():
        n = compiles(lambda: close(compiled(x), net(x)))
    assert n >= 2, n
    assert "a graph break" in capsys.readouterr().out


def test_options_numpy_and_emulator_agree():
    torch.manual_seed(6)
    net = nn.Sequential(nn.Linear(5, 7), nn.SiLU(), nn.LayerNorm(7)).eval()
    x = torch.randn(3, 5)
    outs = {}
    for backend in ("numpy", "emulator"):
        torch._dynamo.reset()
        compiled = torch.compile(net, backend=refcomp_backend, options={"backend": backend, **FAST})
        with torch.no_grad():
            n = compiles(lambda: outs.setdefault(backend, compiled(x)))
        assert n == (0 if backend == "numpy" else 1)  # the NumPy reference needs no compile
        with torch.no_grad():
            close(outs[backend], net(x))
    np.testing.assert_allclose(outs["numpy"].numpy(), outs["emulator"].numpy(), rtol=1e-5, atol=1e-6)


def test_integer_and_boolean_outputs_keep_torch_dtypes():
    def fn(x, ids):
        return (x > 0), ids * 0 + ids.shape[0], x.sum(-1)
    compiled = torch.compile(fn, backend=refcomp_backend, options={"backend": "numpy"})
    x, ids = torch.randn(3, 4), torch.tensor([1, 2, 3])
    got, want = compiled(x, ids), fn(x, ids)
    assert [g.dtype for g in got] == [torch.bool, torch.int64, torch.float32]
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    close(got[2], want[2])


def test_unknown_options_are_refused():
    with pytest.raises(Exception, match="unknown refcomp option 'backnd'"):
        torch.compile(nn.Linear(2, 2), backend=refcomp_backend, options={"backnd": "numpy"})(
            torch.randn(1, 2)
        )


def test_an_unsupported_op_is_the_frontends_error_not_a_silent_fallback():
    def fn(x):
        return torch.special.digamma(x) + 1
    compiled = torch.compile(fn, backend=refcomp_backend, options={"backend": "numpy"})
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        compiled(torch.rand(3) + 1)
    cause = info.value.inner_exception
    assert isinstance(cause, RefcompError), type(cause)
    assert "RefcompError: the exported program uses 1 ATen op" in str(info.value)  # dynamo shows it
    assert "1 ATen op refcomp does not implement: aten.digamma.default x1" in str(cause)


def test_backward_is_refused():
    net = nn.Linear(3, 2)
    compiled = torch.compile(net, backend=refcomp_backend, options={"backend": "numpy"})
    out = compiled(torch.randn(2, 3)).sum()
    with pytest.raises(RefcompError, match="inference only"):
        out.backward()


def test_backend_by_name():
    """backend="refcomp": the installed entry point, or (where this checkout is not the installed
    distribution) the same function registered by hand."""
    from torch._dynamo.backends.registry import list_backends, register_backend
    if "refcomp" not in list_backends(exclude_tags=()):
        register_backend(refcomp_backend, name="refcomp")
    net = nn.Linear(4, 2).eval()
    compiled = torch.compile(net, backend="refcomp", options={"backend": "numpy"})
    x = torch.randn(3, 4)
    with torch.no_grad():
        close(compiled(x), net(x))


def test_entry_point_is_declared():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    group = project["project"]["entry-points"]["torch_dynamo_backends"]
    assert group == {"refcomp": "refcomp.torch_backend:refcomp_backend"}


def test_installed_entry_point_loads_the_backend():
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    if "refcomp" not in eps.names:
        pytest.skip("the installed refcomp distribution predates its torch_dynamo_backends entry point "
                    "(reinstall with `pip install -e .` to register it)")
    assert eps["refcomp"].value == "refcomp.torch_backend:refcomp_backend"
    assert eps["refcomp"].load() is refcomp_backend
