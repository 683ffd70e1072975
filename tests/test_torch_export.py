"""rc.torch: PyTorch models through torch.export, against PyTorch at two sizes of a dynamic batch on
the reference and the emulator; dims, ranges, errors and provenance."""
import inspect
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.export frontend tests need PyTorch")
from torch import nn  # noqa: E402

import refcomp as rc  # noqa: E402
from refcomp.errors import BindingError, RefcompError  # noqa: E402

Dim = torch.export.Dim
B = Dim("B", min=1, max=16)


def check(m, net, make, sizes=(2, 5), backends=("numpy", "emulator"), tol=1e-5):
    """m's outputs at each batch size against the module's, by max error relative to the output's scale."""
    for b in sizes:
        inputs = make(b)
        with torch.no_grad():
            want = net(*inputs).numpy()
        for backend in backends:
            got = m.run(dict(zip(m.input_types, inputs)), backend=backend)["output"]
            assert got.shape == want.shape, (backend, b)
            err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-6)
            assert err < tol, (backend, b, err)


def test_mlp_compiles_once_and_runs_two_batches():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4), nn.LogSoftmax(-1)).eval()
    m = rc.torch.export(net, (torch.randn(3, 8),), dynamic_shapes={"input": {0: B}})
    assert [str(d) for d in m.inputs["input"].shape] == ["B", "8"] and m.dims == {"B": (1, 16)}
    assert set(m.weights) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    check(m, net, lambda b: (torch.randn(b, 8),))
    assert len(m.__dict__["_programs"]) == 1  # one compiled program served both sizes


def test_transformer_encoder_layer():
    torch.manual_seed(1)
    net = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    m = rc.torch.export(net, (torch.randn(2, 5, 16),), dynamic_shapes={"src": {0: B}})
    check(m, net, lambda b: (torch.randn(b, 5, 16),))


def test_cnn_with_batch_norm_conv_and_pools():
    torch.manual_seed(2)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, stride=2, groups=2),
        nn.AvgPool2d(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    ).eval()
    with torch.no_grad():  # statistics a trained network would have
        (
            net[1].running_mean.uniform_(-1, 1),
            net[1].running_var.uniform_(0.5, 2),
            net[1].weight.uniform_(0.5, 2),
        )
    m = rc.torch.export(net, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"input": {0: B}})
    check(m, net, lambda b: (torch.randn(b, 3, 16, 16),))


class Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell

    def forward(self, x):
        return self.rnn(x)[0]


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_recurrent_networks(cell):
    torch.manual_seed(3)
    rnn = (
        nn.LSTM(8, 16, batch_first=True) if cell == "lstm" else nn.GRU(8, 16, num_layers=2, batch_first=True)
    )
    net = Recurrent(rnn).eval()
    m = rc.torch.export(net, (torch.randn(2, 5, 8),), dynamic_shapes={"x": {0: B}})
    check(
        m,
        net,
        lambda b: (torch.randn(b, 5, 8),),
        backends=("numpy", "emulator") if cell == "lstm" else ("numpy",),
    )


def test_dim_auto_keeps_torch_names_and_a_binding_outside_the_range_is_refused():
    torch.manual_seed(4)
    net = nn.Linear(4, 3).eval()
    m = rc.torch.export(net, (torch.randn(3, 4),), dynamic_shapes={"input": {0: Dim.AUTO}})
    (name,) = m.dims
    assert name.startswith("s") and m.dims[name][1] is None  # torch's own name, no max
    check(m, net, lambda b: (torch.randn(b, 4),), sizes=(2, 7))
    ranged = rc.torch.export(net, (torch.randn(3, 4),), dynamic_shapes={"input": {0: Dim("N", min=2, max=8)}})
    x = np.random.default_rng(0).standard_normal((9, 4)).astype(np.float32)
    for run in (lambda: ranged.evaluate({"input": x}), lambda: ranged.run({"input": x}, backend="emulator"),
                lambda: rc.compile(ranged.outputs).run(ranged.feeds({"input": x}), backend="emulator")):
        with pytest.raises(BindingError, match=r"N = 9 .*outside the range \[2, 8\]"):
            run()
    with pytest.raises(BindingError, match=r"N = 1 "):
        ranged.evaluate({"input": x[:1]})


def test_input_ranges_are_checked_at_every_binding_and_kept_in_saved_programs(tmp_path):
    x = rc.input("x", ("N", 4), ranges={"N": (2, 8)})
    program = rc.compile((x * 2.0).sum(-1))
    program.save(str(tmp_path / "p.json"))
    loaded = rc.load_program(str(tmp_path / "p.json"))
    feeds = {"x": np.ones((9, 4), np.float32)}
    for run in (lambda: rc.evaluate(x.sum(-1), feeds), lambda: program.run(feeds, backend="numpy"),
                lambda: loaded.run(feeds, backend="emulator")):
        with pytest.raises(BindingError, match=r"N = 9 \(from input 'x'\) is outside the range \[2, 8\]"):
            run()
    assert loaded.run({"x": np.ones((8, 4), np.float32)}, backend="emulator").tolist() == [8.0] * 8
    with pytest.raises(rc.ShapeError, match="ranges names 'M'"):
        rc.input("y", ("N",), ranges={"M": (1, 2)})
    with pytest.raises(rc.ShapeError, match="min <= max"):
        rc.input("y", ("N",), ranges={"N": (3, 2)})


class Positions(nn.Module):
    """A running count over positions computed at run time: counted in int64, exact at any length."""

    def forward(self, x):
        steps = torch.arange(x.shape[1]) != 3
        return x * steps.cumsum(-1)


def test_integer_tensors_from_positions_are_counted_exactly_with_no_max_on_the_dims():
    x = torch.randn(2, 6)
    m = rc.torch.export(Positions(), (x,), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}})
    t = [d for d in m.inputs["x"].shape][1].name
    assert m.dims[t][1] is None  # the cumsum of booleans is an int64 count: T needs no cap to stay exact
    assert any(n.op.name == "SumReduce" and n.dtype == "int64" for k in m.compile().kernels for n in k.nodes)
    check(m, Positions(), lambda b: (torch.randn(b, 6),), sizes=(2, 3), backends=("numpy",))


class RunTimeInts(nn.Module):
    def forward(self, x, ids):
        big = ids * 3 + 2**40  # past 2^24, where float32 would lose the last digits
        return x * (big - 2**40).float(), big, (big // 7) % 5, torch.fmod(big - 2**41, 9)


class CastInts(nn.Module):
    def forward(self, x):
        return (x * 100).long().clamp(-5, 5), (x * 1e9).long() * 3 + 1


def test_run_time_integer_arithmetic_is_exact_on_every_backend():
    ids = torch.tensor([[0, 1, 2], [3, 4, 2**30]])
    for net, args in ((RunTimeInts(), (torch.randn(2, 3), ids)), (CastInts(), (torch.randn(2, 3) * 4,))):
        m = rc.torch.export(net, args)
        with torch.no_grad():
            want = net(*args)
        for backend in ("numpy", "emulator"):
            got = m.run(dict(zip(m.input_types, args)), backend=backend)
            for k, w in enumerate(want):
                g = got[f"output{k}"]
                assert g.dtype == w.numpy().dtype, (backend, k, g.dtype)
                if w.dtype == torch.int64:
                    np.testing.assert_array_equal(g, w.numpy(), err_msg=f"{backend} output{k}")
                else:
                    np.testing.assert_allclose(g, w.numpy(), rtol=1e-6)


class Unsupported(nn.Module):
    def forward(self, x, index):
        y = x.scatter_add(1, index, x)
        z = torch.digamma(x)
        return y.scatter_add(1, index, z)


def test_missing_ops_are_listed_in_one_error_with_counts_and_lines():
    lines = inspect.getsource(Unsupported.forward).splitlines()
    first = inspect.getsourcelines(Unsupported.forward)[1]
    at = {
        word: first + k
        for k, line in enumerate(lines)
        for word in ("x.scatter_add", "digamma", "y.scatter_add")
        if word in line
    }
    with pytest.raises(RefcompError) as info:
        rc.torch.export(Unsupported(), (torch.rand(2, 3), torch.tensor([[0, 1, 2], [2, 1, 0]])))
    message = str(info.value)
    assert "2 ATen ops refcomp does not implement" in message
    assert (
        f"aten.scatter_add.default x2 (test_torch_export.py:{at['x.scatter_add']}, "
        f"test_torch_export.py:{at['y.scatter_add']}): writes at indices computed at run time" in message
    )
    assert f"aten.digamma.default x1 (test_torch_export.py:{at['digamma']})" in message


def test_a_module_exported_in_training_mode_is_told_to_use_eval():
    with pytest.raises(
        RefcompError, match=r"_native_batch_norm_legit_functional.* export the module in eval mode"
    ):
        rc.torch.export(nn.Sequential(nn.BatchNorm1d(4), nn.Dropout(0.5)).train(), (torch.randn(3, 4),))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 8)

    def forward(self, x):
        h = self.fc1(x).relu()
        return self.fc2(h).softmax(-1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_kernels_name_the_module_path_and_source_line():
    source, first = inspect.getsourcelines(Block.forward)
    line = {
        word: first + k for k, text in enumerate(source) for word in ("fc1", "fc2") if f"self.{word}(" in text
    }
    m = rc.torch.export(Net().eval(), (torch.randn(2, 8),), dynamic_shapes={"x": {0: B}})
    program = m.compile(search=False)
    ops = {op for k in program.kernels for op in k.ops}
    assert {"blocks.0.fc1", "blocks.1.fc2"} <= ops
    text = "\n".join(k.source for k in program.kernels)
    assert f"blocks.0.fc1 (test_torch_export.py:{line['fc1']})" in text
    assert f"blocks.1.fc2 (test_torch_export.py:{line['fc2']})" in text
    assert any(k.name.startswith("k0_blocks_0_fc1") for k in program.kernels)  # names are C identifiers


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(20, 6)

    def forward(self, ids, mask):
        h = self.table(ids)
        return h.masked_fill((mask == 0)[..., None], 0.0).sum(1)


def test_fed_int64_ids_and_masks():
    torch.manual_seed(5)
    net = Lookup().eval()
    T = Dim("T", min=1, max=32)
    make = lambda b: (torch.randint(0, 20, (b, 7)), (torch.rand(b, 7) > 0.3).long())  # noqa: E731
    m = rc.torch.export(net, make(2), dynamic_shapes={"ids": {0: B, 1: T}, "mask": {0: B, 1: T}})
    assert m.input_types == {"ids": "int64", "mask": "int64"}
    check(m, net, make)


class Sizes(nn.Module):
    def forward(self, x):
        return x.relu(), x.shape[0] * 2, None


def test_outputs_known_at_import_time_and_export_errors():
    m = rc.torch.export(Sizes(), (torch.randn(3, 2),), dynamic_shapes={"x": {0: B}})
    out = m.run({"x": np.ones((5, 2), np.float32)}, backend="emulator")
    assert list(out) == ["output0", "output1", "output2"] and out["output1"] == 10 and out["output2"] is None
    with pytest.raises(RefcompError, match="torch.export could not export the module"):
        rc.torch.export(Sizes(), (torch.randn(3, 2),), dynamic_shapes={"y": {0: B}})


def test_importing_refcomp_does_not_import_torch():
    code = "import sys, refcomp; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


class Bags(nn.Module):
    def __init__(self, mode: str, padding_idx=None):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=padding_idx)

    def forward(self, ids, offsets):
        return self.bag(ids, offsets)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bags_match_torch_with_offsets_and_empty_bags(mode):
    torch.manual_seed(0)
    net = Bags(mode, padding_idx=3 if mode == "mean" else None).eval()
    ids, offsets = torch.tensor([1, 3, 4, 9, 4, 3, 2]), torch.tensor([0, 2, 2, 5])  # bag 1 is empty
    m = rc.torch.export(net, (ids, offsets))
    with torch.no_grad():
        want = net(ids, offsets).numpy()
    for backend in ("numpy", "emulator"):
        got = m.run({"ids": ids, "offsets": offsets}, backend=backend)["output"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=backend)


class BagSizes(nn.Module):
    def forward(self, weight, ids, offsets):
        return torch.ops.aten._embedding_bag(weight, ids, offsets, False, 1)[2] + 1


def test_embedding_bag_bookkeeping_results_are_refused_when_read():
    args = (torch.randn(10, 4), torch.tensor([1, 2, 3]), torch.tensor([0, 1]))
    with pytest.raises(RefcompError, match="reads embedding_bag's offset2bag, bag_size or max_indices"):
        rc.torch.export(BagSizes(), args)
