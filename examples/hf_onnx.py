"""Hugging Face models exported to ONNX with dynamic batch and sequence axes, imported by refcomp.

`export(kind, path)` builds a small randomly initialised BERT or GPT-2 (transformers' own classes;
nothing is downloaded), exports `last_hidden_state` given `input_ids` and an int64 `attention_mask`
with `torch.onnx.export` (the TorchScript exporter, opset 17, axes "batch" and "seq" dynamic), and
`check(kind, path, sizes, backends)` imports the file once and compares refcomp with PyTorch at
each (batch, seq), with the last sequence padded by two positions. The exports compute their
position ids with Range(0, seq) and their masks by index arithmetic on such ranges; refcomp keeps
those integer tensors symbolic (refcomp/frontends/onnx_positions.py) and reads the embeddings
through views. examples/bert_onnx.py and examples/gpt2_onnx.py run it.
"""
from __future__ import annotations

import os
import sys
import time
import warnings

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import refcomp as rc  # noqa: E402

VOCAB, HIDDEN, LAYERS, HEADS, POSITIONS = 100, 32, 2, 2, 64


def model(kind: str, seed: int = 0):
    """A small random-init transformers model in eval mode, and a function of (ids, mask) -> hidden states."""
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model
    torch.manual_seed(seed)
    if kind == "bert":
        net = BertModel(
            BertConfig(
                vocab_size=VOCAB,
                hidden_size=HIDDEN,
                num_hidden_layers=LAYERS,
                num_attention_heads=HEADS,
                intermediate_size=2 * HIDDEN,
                max_position_embeddings=POSITIONS,
            )
        )
    elif kind == "gpt2":
        net = GPT2Model(
            GPT2Config(
                vocab_size=VOCAB,
                n_embd=HIDDEN,
                n_layer=LAYERS,
                n_head=HEADS,
                n_positions=POSITIONS,
                bos_token_id=0,
                eos_token_id=0,
            )
        )
    else:
        raise ValueError(f"kind must be 'bert' or 'gpt2', got {kind!r}")
    net.eval()

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask):
            return self.net(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return LastHidden().eval()


def inputs(batch: int, seq: int, seed: int = 1):
    """Random token ids and a mask whose last sequence is padded by two positions (int64, as tokenizers
    give)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, max(seq - 2, 1):] = 0
    return ids, mask


def export(kind: str, path: str, seed: int = 0):
    import torch
    net = model(kind, seed)
    ids, mask = (torch.from_numpy(a) for a in inputs(2, 7))
    axes = {0: "batch", 1: "seq"}
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notices
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (ids, mask), path, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    return net


def check(kind: str, path: str, net, sizes=((2, 7), (3, 12)), backends=("numpy", "emulator")) -> dict:
    """{(backend, batch, seq): max abs error against PyTorch} for the model imported from `path`."""
    import torch
    imported = rc.onnx.import_model(path)
    errors = {}
    for batch, seq in sizes:
        ids, mask = inputs(batch, seq)
        with torch.no_grad():
            want = net(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        for backend in backends:
            feeds = {"input_ids": ids, "attention_mask": mask}
            got = imported.evaluate(feeds) if backend == "numpy" else imported.run(feeds, backend=backend)
            errors[(backend, batch, seq)] = float(np.abs(got["last_hidden_state"] - want).max())
    return errors


def main(kind: str) -> int:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{kind}.onnx")
        started = time.perf_counter()
        net = export(kind, path)
        print(f"exported a random-init {kind} ({LAYERS} layers, hidden {HIDDEN}) with dynamic batch and seq "
              f"in {time.perf_counter() - started:.1f} s")
        for (backend, batch, seq), err in check(kind, path, net).items():
            verdict = "PASS" if err < 1e-4 else "FAIL"
            print(f"{verdict}  {backend:8s} batch={batch} seq={seq:<3d} max |refcomp - torch| = {err:.2e}")
    return 0
