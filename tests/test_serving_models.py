"""The serving models load what transformers saves (a state dict or a safetensors file) and refuse,
with a ModelError naming the key or field, what they cannot use; the full-sequence forward they
build matches torch's logits; random_gpt2 runs without torch."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp.serving.models import ModelError, from_transformers, random_gpt2
from refcomp.serving.programs import full_graph

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _llama():
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(
        num_hidden_layers=1,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=1,
        intermediate_size=64,
        vocab_size=40,
        max_position_embeddings=32,
        initializer_range=0.2,
    )
    return cfg, transformers.LlamaForCausalLM(cfg).eval()


def test_full_forward_matches_torch_and_safetensors_load_alike(tmp_path):
    from safetensors.torch import save_file
    cfg, hf = _llama()
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(path))
    a, b = from_transformers(cfg, hf.state_dict()), from_transformers(cfg, path)
    assert a.spec == b.spec and a.spec.kv_heads == 1 and a.spec.heads == 4
    assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    ids = np.array([[3, 1, 4, 1, 5, 9, 2, 6]], np.int32)
    feeds = {**a.feeds(), "ids": ids, "positions": np.arange(8, dtype=np.int32)[None]}
    got = rc.evaluate(full_graph(a), feeds)
    with torch.no_grad():
        want = hf(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_what_cannot_be_used_is_refused(tmp_path):
    cfg, hf = _llama()
    state = hf.state_dict()
    with pytest.raises(ModelError, match="safetensors"):
        from_transformers(cfg, tmp_path / "model.bin")
    with pytest.raises(ModelError, match="embed_tokens"):
        from_transformers(cfg, {k: v for k, v in state.items() if "embed_tokens" not in k})
    with pytest.raises(ModelError, match="model_type"):
        from_transformers(transformers.BertConfig(), state)
    scaled = transformers.LlamaConfig(
        **{**cfg.to_dict(), "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    )
    with pytest.raises(ModelError, match="rope_type"):
        from_transformers(scaled, state)
    with pytest.raises(ModelError, match="not a file|No such|weights file"):
        from_transformers(cfg, tmp_path / "missing.safetensors")
    with pytest.raises(ModelError, match="multiple"):
        random_gpt2(d_model=30, heads=4)


def test_random_gpt2_is_a_gpt2():
    model = random_gpt2(layers=1, d_model=16, heads=2, vocab=20, positions=16)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=20, n_positions=16)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    state = {
        ("transformer." + k if k != "lm_head.weight" else k): torch.tensor(v)
        for k, v in model.weights.items()
    }
    state["lm_head.weight"] = state["transformer.wte.weight"]
    hf.load_state_dict(state, strict=False)
    ids = np.array([[1, 2, 3, 4]], np.int32)
    got = rc.evaluate(
        full_graph(model), {**model.feeds(), "ids": ids, "positions": np.arange(4, dtype=np.int32)[None]}
    )
    with torch.no_grad():
        want = hf(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
