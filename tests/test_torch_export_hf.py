"""Hugging Face GPT-2 and BERT (small configs, random weights, nothing downloaded) through rc.torch:
exported once with dynamic batch and sequence, they match PyTorch at two sizes on the reference and
the emulator, with an int64 attention mask whose last sequence is padded."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch.export frontend tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="needs transformers (pip install -e '.[models]')")

import refcomp as rc  # noqa: E402
from refcomp.errors import BindingError  # noqa: E402

VOCAB, HIDDEN, POSITIONS = 100, 32, 64


class LastHidden(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, attention_mask):
        return self.net(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def model(kind: str):
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=2 * HIDDEN,
            max_position_embeddings=POSITIONS,
        )
        return LastHidden(transformers.BertModel(config)).eval()
    # GPT-2's SDPA path does not export with a dynamic batch in this transformers (a view of its transposed
    # attention output fails inside torch.export), so its eager attention: the same model, written out
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=2,
        n_head=2,
        n_positions=POSITIONS,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
        attn_implementation="eager",
    )
    return LastHidden(transformers.GPT2Model(config)).eval()


def inputs(batch: int, seq: int):
    ids = torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(batch * 100 + seq))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[-1, seq - 2:] = 0
    return ids, mask


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_model_matches_torch_at_two_sizes(kind):
    net = model(kind)
    batch, seq = torch.export.Dim("B", min=1, max=8), torch.export.Dim("T", min=2, max=32)
    axes = {0: batch, 1: seq}
    m = rc.torch.export(net, inputs(2, 7), dynamic_shapes={"input_ids": axes, "attention_mask": axes})
    assert m.dims == {"B": (1, 8), "T": (2, 32)}
    assert any(
        name.endswith("attn.c_attn.weight") or name.endswith("attention.self.query.weight")
        for name in m.weights
    )
    for size in ((2, 7), (3, 12)):
        ids, mask = inputs(*size)
        with torch.no_grad():
            want = net(ids, mask).numpy()
        for backend in ("numpy", "emulator"):
            got = m.run({"input_ids": ids, "attention_mask": mask}, backend=backend)["output"]
            err = np.abs(got - want).max() / np.abs(want).max()
            assert err < 1e-5, (kind, size, backend, err)
    ids, mask = inputs(1, 33)
    with pytest.raises(BindingError, match="T = 33"):
        m.evaluate({"input_ids": ids, "attention_mask": mask})
    program = m.compile()
    ops = {op for k in program.kernels for op in k.ops}
    assert any(
        op.startswith("net.h.0.attn") or op.startswith("net.encoder.layer.0.attention") for op in ops
    ), ops
