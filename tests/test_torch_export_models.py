"""Models that must run through rc.torch (issue 29): a LLaMA-style decoder (RMSNorm, rotary embeddings,
SwiGLU, grouped-query attention), a ResNet-style and a MobileNetV3-style CNN (depthwise convs,
hardswish, squeeze-excite) written here because torchvision is not installed, and a several-layer
nn.TransformerEncoder. Each is exported once with a dynamic batch (and sequence where it has one)
and must match PyTorch eager at two bindings on the reference and the emulator (float32, max error
relative to the output's scale <= 1e-5). Sizes are tiny: the point is the ops, not the arithmetic."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.export frontend tests need PyTorch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import refcomp as rc  # noqa: E402

Dim = torch.export.Dim
TOL = 1e-5


def check(m, net, inputs, sizes):
    """m's output against the module's at each size, by max error relative to the output's scale,
    on the NumPy reference and the emulator; `inputs(size)` makes the positional inputs."""
    for size in sizes:
        args = inputs(*size)
        with torch.no_grad():
            want = net(*args).numpy()
        for backend in ("numpy", "emulator"):
            got = m.run(dict(zip(m.input_types, args)), backend=backend)["output"]
            assert got.shape == want.shape, (backend, size)
            err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-6)
            assert err <= TOL, (backend, size, err)


def trained_norms(net: nn.Module) -> nn.Module:
    """Batch-norm statistics and affine terms a trained network would have (fresh ones are identities)."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for mod in net.modules():
            if isinstance(mod, nn.BatchNorm2d):
                n = mod.num_features
                mod.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
                mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(n, generator=g) + 0.5)
                mod.bias.copy_(torch.rand(n, generator=g) - 0.5)
    return net.eval()


def images(batch: int):
    return (torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(batch)),)


# --- LLaMA ---------------------------------------------------------------------------------------------
class Logits(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, attention_mask):
        return self.net(input_ids=input_ids, attention_mask=attention_mask).logits


def token_inputs(batch: int, seq: int, vocab: int = 100):
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(batch * 100 + seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq - 2:] = 0  # the last sequence is padded
    return ids, mask


def test_llama_decoder_with_grouped_query_attention():
    transformers = pytest.importorskip(
        "transformers", reason="needs transformers (pip install -e '.[models]')"
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
    )  # SDPA attention (eager's is GPT-2's, tested elsewhere)
    net = Logits(transformers.LlamaForCausalLM(config)).eval()
    axes = {0: Dim("B", min=1, max=8), 1: Dim("T", min=2, max=32)}
    m = rc.torch.export(net, token_inputs(2, 7), dynamic_shapes={"input_ids": axes, "attention_mask": axes})
    assert m.dims == {"B": (1, 8), "T": (2, 32)}
    # grouped-query attention: 2 key/value heads of 8 serve 4 query heads
    assert tuple(m.weights["net.model.layers.0.self_attn.k_proj.weight"].shape) == (16, 32)
    assert "net.model.layers.1.mlp.gate_proj.weight" in m.weights  # SwiGLU
    check(m, net, token_inputs, [(2, 7), (3, 12)])


# --- ResNet ----------------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    """torchvision's resnet18 in miniature: stem, max pool, residual stages, global pool, classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def test_resnet_style_cnn():
    torch.manual_seed(0)
    net = trained_norms(ResNet())
    m = rc.torch.export(net, images(2), dynamic_shapes={"x": {0: Dim("B", min=1, max=8)}})
    check(m, net, images, [(2,), (3,)])


# --- MobileNetV3 -----------------------------------------------------------------------------------------
class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


class InvertedResidual(nn.Module):
    """Expand (1x1), depthwise k x k, optional squeeze-excite, project (1x1), residual when shapes allow."""

    def __init__(self, cin: int, expand: int, cout: int, k: int, stride: int, se: bool, act):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, expand, 1, bias=False), nn.BatchNorm2d(expand), act())
        self.depthwise = nn.Sequential(
            nn.Conv2d(expand, expand, k, stride, k // 2, groups=expand, bias=False),
            nn.BatchNorm2d(expand),
            act(),
        )
        self.se = SqueezeExcite(expand, max(expand // 4, 4)) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(expand, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.depthwise(self.expand(x))))
        return x + y if self.residual else y


class MobileNetV3(nn.Module):
    """torchvision's mobilenet_v3_small in miniature."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish())
        self.blocks = nn.Sequential(InvertedResidual(8, 8, 8, 3, 1, True, nn.ReLU),
                                    InvertedResidual(8, 24, 12, 3, 2, False, nn.ReLU),
                                    InvertedResidual(12, 36, 12, 5, 1, True, nn.Hardswish))
        self.last = nn.Sequential(nn.Conv2d(12, 32, 1, bias=False), nn.BatchNorm2d(32), nn.Hardswish())
        self.classifier = nn.Sequential(nn.Linear(32, 24), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(24, 10))

    def forward(self, x):
        return self.classifier(
            torch.flatten(F.adaptive_avg_pool2d(self.last(self.blocks(self.stem(x))), 1), 1)
        )


def test_mobilenet_v3_style_cnn():
    torch.manual_seed(1)
    net = trained_norms(MobileNetV3())
    m = rc.torch.export(net, images(2), dynamic_shapes={"x": {0: Dim("B", min=1, max=8)}})
    assert tuple(m.weights["blocks.2.depthwise.0.weight"].shape) == (36, 1, 5, 5)  # depthwise
    check(m, net, images, [(2,), (3,)])


# --- nn.TransformerEncoder ---------------------------------------------------------------------------------
class CausalEncoder(nn.Module):
    """Three post-norm GELU layers and a final norm, under a causal mask built from the run's length."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(16), enable_nested_tensor=False)

    def forward(self, src):
        causal = nn.Transformer.generate_square_subsequent_mask(src.shape[1])
        return self.encoder(src, mask=causal, is_causal=True)


def sequences(batch: int, seq: int):
    return (torch.randn(batch, seq, 16, generator=torch.Generator().manual_seed(batch * 100 + seq)),)


def test_transformer_encoder_with_several_layers():
    torch.manual_seed(2)
    net = CausalEncoder().eval()
    axes = {0: Dim("B", min=1, max=8), 1: Dim("T", min=2, max=32)}
    m = rc.torch.export(net, sequences(2, 7), dynamic_shapes={"src": axes})
    assert {f"encoder.layers.{i}.linear1.weight" for i in range(3)} <= set(m.weights)
    check(m, net, sequences, [(2, 7), (3, 12)])
