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


def matches_torch_at_two_sizes(m, net, kind: str) -> None:
    """m's output against the module's at two batch and sequence sizes, on the reference and the emulator."""
    for size in ((2, 7), (3, 12)):
        ids, mask = inputs(*size)
        with torch.no_grad():
            want = net(ids, mask).numpy()
        for backend in ("numpy", "emulator"):
            got = m.run({"input_ids": ids, "attention_mask": mask}, backend=backend)["output"]
            err = np.abs(got - want).max() / np.abs(want).max()
            assert err < 1e-5, (kind, size, backend, err)


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
    matches_torch_at_two_sizes(m, net, kind)
    ids, mask = inputs(1, 33)
    with pytest.raises(BindingError, match="T = 33"):
        m.evaluate({"input_ids": ids, "attention_mask": mask})
    program = m.compile()
    ops = {op for k in program.kernels for op in k.ops}
    assert any(
        op.startswith("net.h.0.attn") or op.startswith("net.encoder.layer.0.attention") for op in ops
    ), ops


def integer_model(kind: str):
    """RoBERTa counts its position ids from the mask at run time (a cumsum, int arithmetic, a lookup);
    T5 buckets relative positions at run time (a log of their float, cast back to int64, min, where)."""
    torch.manual_seed(0)
    if kind == "roberta":
        config = transformers.RobertaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=2 * HIDDEN, max_position_embeddings=POSITIONS + 2, pad_token_id=1,
        )
        return LastHidden(transformers.RobertaModel(config)).eval()
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=2 * HIDDEN, num_layers=2, num_heads=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, feed_forward_proj="relu",
    )
    return LastHidden(transformers.T5EncoderModel(config)).eval()


@pytest.mark.parametrize("kind", ["roberta", "t5"])
def test_models_computing_integers_at_run_time_match_torch(kind):
    net = integer_model(kind)
    axes = {0: torch.export.Dim("B", min=1, max=8), 1: torch.export.Dim("T", min=2, max=32)}
    m = rc.torch.export(net, inputs(2, 7), dynamic_shapes={"input_ids": axes, "attention_mask": axes})
    assert m.dims == {"B": (1, 8), "T": (2, 32)}  # exact integers: no dim is capped to keep them in float32
    assert any(n.dtype == "int64" and n.op.name != "Input" for k in m.compile().kernels for n in k.nodes)
    matches_torch_at_two_sizes(m, net, kind)
