"""Arrays held on the backend between runs (exec/resident.py): a table written in place by one run is
read by the next, weights are read without being fed, and what the runner would refuse in a feed it
refuses here too. The oracle is NumPy applying the same writes in float64; the engine's is its own
run on the reference backend (exact tokens, and the pool it wrote)."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp.errors import FeedError, RefcompError
from refcomp.exec.emulator import EmulatorBackend
from refcomp.exec.resident import OnDevice, Resident
from refcomp.serving.engine import Engine
from serving_oracle import prompt, tiny_model

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def program():
    """Rows of x @ w written into table t at ids, and the table's row sums after the write."""
    t, w = rc.input("t", (8, 4)), rc.input("w", (4, 4))
    ids, x = rc.input("ids", ("N",), "int32"), rc.input("x", ("N", 4))
    new = t.index_copy(0, ids, x @ w)
    return rc.compile({"t": new, "sums": new.sum(1)}, dims_hint={"N": 2}, cache=False)


def _arrays():
    return (RNG.standard_normal((8, 4)).astype(np.float32), RNG.standard_normal((4, 4)).astype(np.float32))


def test_a_held_table_is_written_in_place_and_the_next_run_reads_the_write(program):
    table, weights = _arrays()
    held = Resident({"t": table, "w": weights}, "emulator")
    want = table.astype(np.float64)
    for ids in ([1, 5], [0, 1, 7], [5]):
        x = RNG.standard_normal((len(ids), 4)).astype(np.float32)
        got = program.run({"ids": np.array(ids, np.int32), "x": x}, resident=held)
        want[ids] = x.astype(np.float64) @ weights.astype(np.float64)
        assert isinstance(got["t"], OnDevice) and got["t"].name == "t"
        np.testing.assert_allclose(got["sums"], want.sum(1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["t"].numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(held.get("t"), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(held.get("w"), weights)  # read, never written


def test_a_held_array_replaced_by_put_is_what_the_next_run_reads(program):
    table, weights = _arrays()
    held = Resident({"t": table, "w": weights}, "emulator")
    other = RNG.standard_normal((8, 4)).astype(np.float32)
    held.put("t", other)
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    got = program.run({"ids": np.array([2], np.int32), "x": x}, resident=held)
    want = other.astype(np.float64)
    want[2] = x[0] @ weights.astype(np.float64)
    np.testing.assert_allclose(got["sums"], want.sum(1), rtol=1e-5, atol=1e-5)


def test_what_a_feed_would_be_refused_for_a_held_array_is_refused_for(program):
    table, weights = _arrays()
    feeds = {"ids": np.array([1], np.int32), "x": np.ones((1, 4), np.float32)}
    with pytest.raises(FeedError, match="'t' is both fed and resident"):
        program.run({**feeds, "t": table}, resident=Resident({"t": table, "w": weights}, "emulator"))
    with pytest.raises(FeedError, match="input 't' expects size 8 on axis 0"):
        program.run(feeds, resident=Resident({"t": np.zeros((9, 4), np.float32), "w": weights}, "emulator"))
    with pytest.raises(FeedError, match="'w' takes float32, but the resident array is float16"):
        program.run(feeds, resident=Resident({"t": table, "w": weights.astype(np.float16)}, "emulator"))
    held = Resident({"t": table, "w": weights}, "emulator")
    with pytest.raises(FeedError, match=r"'ids' of Scatter.* must lie in \[0, 8\)"):
        program.run({"ids": np.array([3, 8], np.int32), "x": np.ones((2, 4), np.float32)}, resident=held)
    np.testing.assert_array_equal(held.get("t"), table)  # refused before any launch: row 3 not written
    with pytest.raises(FeedError, match="'w' was not fed"):
        program.run(feeds, resident=Resident({"t": table}, "emulator"))
    with pytest.raises(RefcompError, match="numpy backend"):
        program.run(feeds, backend="numpy", resident=Resident({"t": table, "w": weights}, "emulator"))
    with pytest.raises(RefcompError, match="resident must be"):
        program.run(feeds, resident={"t": table})


def test_only_float_arrays_are_held_and_ids_are_never_computed_from_one():
    with pytest.raises(RefcompError, match="only float arrays are held"):
        Resident({"ids": np.zeros(3, np.int32)}, "emulator")
    with pytest.raises(RefcompError, match="numpy backend"):
        Resident({}, "numpy")
    with pytest.raises(RefcompError, match="no array named 'q'"):
        Resident({}, "emulator").get("q")
    with pytest.raises(RefcompError, match="'t' is not a rectangular array"):
        Resident({"t": [[1.0, 2.0], [3.0]]}, "emulator")
    with pytest.raises(RefcompError, match="a dict of name -> array"):
        Resident([np.zeros(2, np.float32)], "emulator")
    table, where = rc.input("table", (6, 2)), rc.input("where", (3,))
    looked_up = table.index_select(0, where.floor().int())
    program = rc.compile(looked_up, cache=False)
    feeds = {"table": np.ones((6, 2), np.float32), "where": np.array([0.0, 2.5, 5.0], np.float32)}
    np.testing.assert_array_equal(program.run(feeds, backend="emulator"), np.ones((3, 2)))
    with pytest.raises(FeedError, match="computed from resident input 'where'"):
        program.run({"table": feeds["table"]}, resident=Resident({"where": feeds["where"]}, "emulator"))


def test_the_engine_holds_weights_and_pool_and_sends_a_step_only_its_own_feeds(monkeypatch):
    """Tokens and the written pool equal the reference engine's; the weights and the pool are
    uploaded once, at the first step, and every step after sends only its few small feeds."""
    prompts = [prompt(5), prompt(9, 3)]
    reference = Engine(tiny_model(), pages=16, page_size=4, backend="numpy", prefill_chunk=8)
    want = reference.generate(prompts, 6, ignore_eos=True)
    uploads = []
    real_upload = EmulatorBackend.upload
    monkeypatch.setattr(EmulatorBackend, "upload",
                        lambda self, a: uploads.append(a.nbytes) or real_upload(self, a))
    engine = Engine(tiny_model(), pages=16, page_size=4, backend="emulator", prefill_chunk=8)
    assert engine.generate(prompts, 6, ignore_eos=True) == want
    held = sum(a.nbytes for a in {**engine.model.feeds(), **engine.pool.feeds()}.values())
    steps = engine.stats["decode_steps"] + 2  # and the prefill steps (one chunk each here)
    assert held <= sum(uploads) < held + 2048 * steps  # tokens, positions, tables, slots, settings
    engine.sync_pool()
    for layer in range(engine.pool.n_layers):
        np.testing.assert_allclose(engine.pool.kv[layer], reference.pool.kv[layer], rtol=1e-4, atol=1e-5)
