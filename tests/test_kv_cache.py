"""The paged KV pool (refcomp/serving/kv_cache.py): its allocator, the graph pieces that read and write
pages, checked against NumPy written directly, a poison test (other sequences' pages full of NaN and
huge values leave a sequence's attention unchanged), and ids or pages outside the pool refused."""
import numpy as np
import pytest

import refcomp as rc
from refcomp.errors import FeedError, KVCacheError
from refcomp.serving import PagedKVPool, context_mask, gather_pages, write_slots

RNG = np.random.default_rng(300)


def test_the_allocator_grows_block_tables_and_frees_pages_lowest_first():
    pool = PagedKVPool(num_pages=5, page_size=4, n_layers=2, n_kv_heads=2, head_dim=3)
    assert pool.k[0].shape == (20, 2, 3) and len(pool.v) == 2
    np.testing.assert_array_equal(pool.allocate("a", 6), [0, 1, 2, 3, 4, 5])  # pages 0, 1
    np.testing.assert_array_equal(pool.allocate("b", 1), [8])  # page 2
    np.testing.assert_array_equal(pool.allocate("a", 3), [6, 7, 12])  # fills page 1, then page 3
    assert pool.pages("a") == [0, 1, 3] and pool.length("a") == 9 and pool.free_pages == 1
    np.testing.assert_array_equal(pool.block_tables(["a", "b"]), [[0, 1, 3], [2, 0, 0]])
    np.testing.assert_array_equal(pool.slots("a", 7, 2), [7, 12])
    with pytest.raises(KVCacheError, match="full"):
        pool.allocate("b", 8)  # needs 2 more pages: nothing changes
    assert pool.pages("b") == [2] and pool.length("b") == 1 and pool.free_pages == 1
    pool.free("a")
    assert pool.free_pages == 4
    np.testing.assert_array_equal(pool.allocate("c", 5), [0, 1, 2, 3, 4])  # the lowest free pages again
    with pytest.raises(KVCacheError, match="holds no pages"):
        pool.pages("a")
    with pytest.raises(KVCacheError, match="not all allocated"):
        pool.slots("c", 4, 2)
    with pytest.raises(KVCacheError, match="n_tokens"):
        pool.allocate("c", -1)


def test_shared_pages_are_held_until_their_last_holder_lets_go():
    """The prefix cache's use of the pool: a sequence adopts another's full pages, and a page is free
    only when neither it nor a `retain` holds it any more."""
    pool = PagedKVPool(num_pages=6, page_size=2, n_layers=1, n_kv_heads=1, head_dim=2)
    pool.allocate("a", 5)  # pages 0, 1, 2
    pool.retain([0, 1])  # the cache keeps a's two full pages
    pool.adopt("b", [0, 1])
    assert pool.length("b") == 4 and pool.holders(0) == 3 and pool.holders(2) == 1
    np.testing.assert_array_equal(pool.allocate("b", 1), [6])  # b's own tokens go to a page of its own
    assert pool.pages_for("b", 2) == 1 and pool.pages_for("new", 3) == 2
    pool.free("a")
    assert pool.free_pages == 3 and pool.holders(0) == 2  # page 2 is free again, 0 and 1 are not
    pool.free("b")
    pool.release([0, 1])
    assert pool.free_pages == 6 and pool.holders(0) == 0
    with pytest.raises(KVCacheError, match="page 4 is free"):
        pool.retain([4])
    pool.allocate("c", 1)
    with pytest.raises(KVCacheError, match="already holds pages"):
        pool.adopt("c", [0])


def test_padded_positions_of_a_chunk_get_distinct_scratch_slots():
    pool = PagedKVPool(num_pages=4, page_size=2, n_layers=1, n_kv_heads=1, head_dim=2, scratch_pages=1)
    pool.allocate("a", 3)
    pool.allocate("b", 1)
    slots = pool.slot_matrix(["a", "b"], [0, 0], [3, 1], 3)
    np.testing.assert_array_equal(slots, [[0, 1, 2], [4, 8, 9]])  # 8 and 9: the scratch page
    with pytest.raises(KVCacheError, match="scratch"):
        pool.slot_matrix(["a", "b"], [0, 0], [3, 1], 4)


def _feeds(pool, layer=0):
    return {pool.input_name(layer, "k"): pool.k[layer]}


def test_write_slots_and_gather_pages_against_numpy_on_the_reference_and_the_emulator():
    pool = PagedKVPool(num_pages=6, page_size=4, n_layers=1, n_kv_heads=2, head_dim=4)
    pool.k[0][:] = RNG.standard_normal(pool.shape)
    pool.allocate("a", 7)
    pool.allocate("b", 2)
    new_slots = np.concatenate([pool.allocate("a", 1), pool.allocate("b", 1)])
    new = RNG.standard_normal((2, 1, 2, 4)).astype(np.float32)
    K = pool.input(0, "k")
    slots, rows = rc.input("slots", ("B", "C"), "int32"), rc.input("new", ("B", "C", 2, 4))
    table, lengths = rc.input("table", ("B", "P"), "int32"), rc.input("lengths", ("B",))
    updated = write_slots(K, slots, rows)
    keys = gather_pages(updated, table, 4, lengths=lengths)
    feeds = {
        **_feeds(pool),
        "slots": new_slots.reshape(2, 1),
        "new": new,
        "table": pool.block_tables(["a", "b"]),
        "lengths": pool.lengths(["a", "b"]).astype(np.float32),
    }

    want_pool = pool.k[0].copy()
    want_pool[new_slots] = new.reshape(2, 2, 4)
    want_keys = np.zeros((2, 8, 2, 4), np.float32)
    for b, seq in enumerate(["a", "b"]):  # each sequence's tokens in order, zeros past its length
        want_keys[b, :pool.length(seq)] = want_pool[pool.slots(seq, 0, pool.length(seq))]
    prog = rc.compile([updated, keys], cache=False, dims_hint={"B": 2, "C": 1, "P": 2})
    for got in (rc.evaluate([updated, keys], feeds), prog.run(feeds, backend="emulator")):
        np.testing.assert_array_equal(got[0], want_pool)
        np.testing.assert_array_equal(got[1], want_keys)
    assert [k.kind for k in prog.kernels].count("scatter") == 1  # the pool is updated in place, never copied:
    assert not any(k.output.op.name == "Contiguous" for k in prog.kernels)


def _decode_attention(q, keys, values, mask, scale):
    """softmax(q . k) v per sequence and head over the positions `mask` keeps."""
    scores = (q.unsqueeze(1) * keys).sum(-1) * scale  # (B, L, H)
    scores = rc.where(mask.unsqueeze(-1), scores, -np.inf)
    return (scores.softmax(1).unsqueeze(-1) * values).sum(1)  # (B, H, D)


def test_poisoned_pages_of_other_sequences_never_reach_a_sequences_attention():
    pool = PagedKVPool(num_pages=8, page_size=2, n_layers=1, n_kv_heads=2, head_dim=4)
    for arrays in (pool.k, pool.v):
        arrays[0][:] = np.nan  # everything not written below is poison
        arrays[0][1::2] = 3e38
    lengths = {"a": 5, "b": 2, "c": 3}
    for seq, n in lengths.items():
        slots = pool.allocate(seq, n)
        pool.k[0][slots] = RNG.standard_normal((n, 2, 4))
        pool.v[0][slots] = RNG.standard_normal((n, 2, 4))
    pool.free("c")  # its pages keep their values: stale data another sequence must not see
    pool.allocate("b", 1)  # b's table now pads to a's, reading page 0 (a's) in its padding
    seqs = ["a", "b"]
    K, V = pool.input(0, "k"), pool.input(0, "v")
    table, held = rc.input("table", ("B", "P"), "int32"), rc.input("held", ("B",))
    q = rc.input("q", ("B", 2, 4))
    keys, values = gather_pages(K, table, 2, lengths=held), gather_pages(V, table, 2, lengths=held)
    out = _decode_attention(q, keys, values, context_mask(held, keys.shape[1]), 0.5)
    qs = RNG.standard_normal((2, 2, 4)).astype(np.float32)
    pool.k[0][pool.slots("b", 2, 1)] = 1.0
    pool.v[0][pool.slots("b", 2, 1)] = 1.0
    feeds = {pool.input_name(0, "k"): pool.k[0], pool.input_name(0, "v"): pool.v[0], "q": qs,
             "table": pool.block_tables(seqs), "held": pool.lengths(seqs).astype(np.float32)}
    want = np.zeros((2, 2, 4))
    for b, seq in enumerate(seqs):  # dense attention over the sequence's own tokens only
        ks = pool.k[0][pool.slots(seq, 0, pool.length(seq))].astype(np.float64)
        vs = pool.v[0][pool.slots(seq, 0, pool.length(seq))].astype(np.float64)
        s = np.einsum("hd,lhd->lh", qs[b], ks) * 0.5
        p = np.exp(s - s.max(0))
        want[b] = np.einsum("lh,lhd->hd", p / p.sum(0), vs)
    for got in (rc.evaluate(out, feeds), rc.compile(out, cache=False).run(feeds, backend="emulator")):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_pages_and_slots_outside_the_pool_are_refused_on_every_backend():
    pool = PagedKVPool(num_pages=3, page_size=2, n_layers=1, n_kv_heads=1, head_dim=2)
    K = pool.input(0, "k")
    table = rc.input("table", ("B", "P"), "int32")
    slots, rows = rc.input("slots", ("N",), "int32"), rc.input("rows", ("N", 1, 2))
    read = gather_pages(K, table, 2)
    written = write_slots(K, slots, rows)
    bad_table = {**_feeds(pool), "table": np.array([[0, 3]], np.int32)}
    bad_slots = {**_feeds(pool), "slots": np.array([6], np.int32), "rows": np.zeros((1, 1, 2), np.float32)}
    repeated = {**bad_slots, "slots": np.array([1, 1], np.int32), "rows": np.zeros((2, 1, 2), np.float32)}
    for graph, feeds, words in (
        (read, bad_table, "[0, 3)"),
        (written, bad_slots, "[0, 6)"),
        (written, repeated, "distinct"),
    ):
        prog = rc.compile(graph, cache=False)
        for run in (lambda: rc.evaluate(graph, feeds), lambda: prog.run(feeds, backend="emulator")):
            with pytest.raises(FeedError, match=words.replace("[", r"\[").replace(")", r"\)")):
                run()


def test_the_builders_refuse_what_does_not_fit():
    K = rc.input("k", (8, 1, 2))
    with pytest.raises(KVCacheError, match="int32"):
        gather_pages(K, rc.input("t", ("B", "P")), 2)
    with pytest.raises(KVCacheError, match="whole pages"):
        gather_pages(K, rc.input("t", ("B", "P"), "int32"), 3)
    with pytest.raises(KVCacheError, match="must have shape"):
        write_slots(K, rc.input("s", ("B",), "int32"), rc.input("n", ("B", 2, 2)))
    with pytest.raises(KVCacheError, match="float tensor"):
        context_mask(rc.input("l", ("B",), "int32"), 4)
    with pytest.raises(KVCacheError, match="num_pages"):
        PagedKVPool(0, 2, 1, 1, 1)
    pool = PagedKVPool(2, 2, 1, 1, 1)
    with pytest.raises(KVCacheError, match="layer"):
        pool.input(1, "k")
    with pytest.raises(KVCacheError, match="shape"):
        pool.store(0, k=np.zeros((3, 1, 1)))


def test_one_decode_program_serves_every_batch_and_cache_length():
    """Symbolic batch, chunk and page counts: a growing sequence runs the same compiled program."""
    pool = PagedKVPool(num_pages=6, page_size=2, n_layers=1, n_kv_heads=1, head_dim=2)
    pool.k[0][:] = RNG.standard_normal(pool.shape)
    K = pool.input(0, "k")
    slots, rows = rc.input("slots", ("B", "C"), "int32"), rc.input("rows", ("B", "C", 1, 2))
    table = rc.input("table", ("B", "P"), "int32")
    updated = write_slots(K, slots, rows)
    total = gather_pages(updated, table, 2).sum((1, 2, 3))
    prog = rc.compile([updated, total], cache=False)
    for step in range(4):  # one token a step: the cache grows through 1, 2, 3 pages
        new = pool.allocate("a", 1)
        feeds = {**_feeds(pool), "slots": new.reshape(1, 1), "rows": np.full((1, 1, 1, 2), step, np.float32),
                 "table": pool.block_tables(["a"])}
        k, s = prog.run(feeds, backend="emulator")
        pool.store(0, k=k)
        page_slots = (np.array(pool.pages("a"))[:, None] * 2 + np.arange(2)).reshape(
            -1
        )  # whole pages, in order
        np.testing.assert_allclose(s, [pool.k[0][page_slots].astype(np.float64).sum()], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(pool.k[0][pool.slots("a", 0, 4)].reshape(-1), np.repeat(np.arange(4.0), 2))


def test_a_layers_keys_and_values_sit_side_by_side_and_store_in_place():
    """pool.kv[l] is (slots, 2, Hkv, D); pool.k[l] and pool.v[l] are its halves, so storing either half
    or the whole array keeps the three in step."""
    pool = PagedKVPool(num_pages=2, page_size=2, n_layers=2, n_kv_heads=1, head_dim=3)
    assert pool.kv[1].shape == pool.kv_shape == (4, 2, 1, 3) and pool.k[1].shape == pool.shape == (4, 1, 3)
    k, v = RNG.standard_normal((2, 4, 1, 3)).astype(np.float32)
    pool.store(1, k=k)
    pool.store(1, v=v)
    np.testing.assert_array_equal(pool.kv[1][:, 0], k)
    np.testing.assert_array_equal(pool.kv[1][:, 1], v)
    both = RNG.standard_normal(pool.kv_shape).astype(np.float32)
    pool.store(1, kv=both)
    np.testing.assert_array_equal(pool.k[1], both[:, 0])
    np.testing.assert_array_equal(pool.v[1], both[:, 1])
    assert set(pool.feeds()) == {"kv_kv0", "kv_kv1"}
    with pytest.raises(KVCacheError, match="shape"):
        pool.store(0, kv=np.zeros((4, 1, 3)))


def test_a_gpt2_decode_step_writes_keys_and_values_in_its_qkv_matmul():
    """The stacked k and v rows are a view of the q/k/v matmul's output (rule join_views): columns
    of it, so each layer's Scatter is written by that matmul as it stores them (search.carry), and
    nothing is copied before it."""
    from refcomp.serving.models import random_gpt2
    from refcomp.serving.programs import step_graph
    from refcomp.serving.sampling import greedy_graph
    model = random_gpt2(layers=2, d_model=32, heads=2, vocab=64, positions=64)
    pool = PagedKVPool(8, 4, 2, 2, 16, scratch_pages=1)
    prog = rc.compile(step_graph(model, pool, 1, greedy_graph), dims_hint={"B": 2, "NP": 2}, cache=False)
    assert [k.kind for k in prog.kernels].count("scatter") == 0
    carrying = [k for k in prog.kernels if k.carried]
    assert len(carrying) == 2 and all(k.kind == "matmul" and len(k.carried) == 1 for k in carrying)
    assert {k.carried[0].srcs[0].node.attrs["name"] for k in carrying} == {"kv_kv0", "kv_kv1"}
    assert "join_views" in [s.rule for s in prog.search.trace]
    assert not any("stack" in k.ops for k in prog.kernels)
