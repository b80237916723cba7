"""The tiled attention of a prompt's chunk (vkq.llama.chunk_attention) against
float64 numpy, against vector_ops.Attention, and against itself in other
chunkings (the same bits for a query whatever chunk it came in).

Shapes: SmolLM2's (9 heads, 3 K/V heads, head_dim 64), a head_dim-128 GQA
one, odd head_dims (37 with RoPE over 20 of them, 33 in neox mode); chunks
that cross key tiles (16 keys on lavapipe) and start at nonzero positions,
on caches whose unwritten positions hold NaN (a read of one would show).
"""
from __future__ import annotations

import numpy as np
import pytest

import vkq.blocks.reference as ref
from test_llama_ops import NMSE_F32, attention64, inv_freq, qkv_parts, step_inputs, upload, zeros
from vkq.llama.chunk_attention import (GPU_INVOCATIONS, GPU_LANE_VEC4S, GPU_ROW_LANES, GPU_SHARED_BYTES,
                                       AttentionTiles, TiledAttention, attention_tiles,
                                       tiled_attention_loop_iterations)
from vkq.llama.vector_ops import (Attention, AttentionShape, Vectors, attention_scratch_size, launches_of,
                                  rope_table)


def rope64(x, positions, freqs, n_rot, neox=False):
    """x (n, heads, hd) float64 rotated as ggml's RoPE: pairs (2i, 2i+1), or
    with neox (i, i + n_rot/2), by pos * freqs[i]; values past n_rot as they are."""
    out = x.astype(np.float64).copy()
    half = n_rot // 2
    first = np.arange(half) if neox else 2 * np.arange(half)
    second = first + (half if neox else 1)
    ang = np.asarray(positions, np.float64)[:, None, None] * freqs[None, None, :]
    x0, x1 = out[..., first].copy(), out[..., second].copy()
    out[..., first] = x0 * np.cos(ang) - x1 * np.sin(ang)
    out[..., second] = x0 * np.sin(ang) + x1 * np.cos(ang)
    return out


def caches(backend, shape: AttentionShape, keys, values):
    """K/V caches holding keys/values (T, Hkv, hd) at positions 0..T-1, NaN after."""
    def lay(x):
        c = np.full((shape.n_head_kv, shape.capacity, shape.head_dim), np.nan, np.float32)
        c[:, : x.shape[0]] = x.transpose(1, 0, 2)
        return c
    return upload(backend, lay(keys)), upload(backend, lay(values))


def run_chunk(backend, shape, qkv, p0, k_c, v_c, freqs, tiles=None, split=None):
    """TiledAttention of the chunk qkv (n stacked q|k|v rows) at positions p0.. on these caches: out (n, H, hd)."""
    n = qkv.shape[0]
    qd = shape.n_head * shape.head_dim
    t = backend.tensor(qkv.shape[1], n)
    t.write(qkv)
    out = backend.tensor(qd, n)
    op = TiledAttention(backend.device, shape, *qkv_parts(t, shape), k_c, v_c, upload(backend, rope_table(
        freqs, shape.capacity)), upload(backend, np.arange(p0, p0 + n), np.int32), Vectors(out, qd), n, tiles=tiles,
        split=split)
    g = backend.graph()
    g.add(op)
    g.output(out)
    g.output(k_c)
    g.output(v_c)
    g.run()
    return out.read().reshape(n, shape.n_head, shape.head_dim), op


def cached(t, shape):
    return t.read().reshape(shape.n_head_kv, shape.capacity, shape.head_dim)


def older_rows(r, shape, p0):
    """Random keys and values (p0, Hkv, hd) of the positions before a chunk."""
    return tuple(r.standard_normal((p0, shape.n_head_kv, shape.head_dim)).astype(np.float32) for _ in "kv")


def expected64(shape, freqs, q, k, v, old_k, old_v, p0):
    """float64 attention of a chunk's queries q (n, H, hd) at p0.. over the
    p0 older keys and values as the cache holds them, then the chunk's own k
    (rotated as the op rotates them) and v."""
    positions = np.arange(p0, p0 + q.shape[0])
    keys = np.concatenate([old_k, rope64(k, positions, freqs, shape.n_rot, shape.neox)])
    values = np.concatenate([old_v, v]).astype(np.float64)
    return attention64(rope64(q, positions, freqs, shape.n_rot, shape.neox), keys, values, shape.n_head,
                       shape.n_head_kv, p0)


def chunk_again(backend, shape, qkv, k_c, v_c, freqs, p0, n, split=None):
    """qkv's queries p0 .. p0+n-1 as a chunk of their own, on caches holding
    only the first p0 keys and values of k_c, v_c: its output and K cache."""
    k_all, v_all = cached(k_c, shape).transpose(1, 0, 2), cached(v_c, shape).transpose(1, 0, 2)
    k_part, v_part = caches(backend, shape, k_all[:p0], v_all[:p0])
    part, _ = run_chunk(backend, shape, qkv[p0:p0 + n], p0, k_part, v_part, freqs, split=split)
    return part, k_part


CASES = [  # n_head, n_head_kv, head_dim, n_rot, neox, p0, n
    pytest.param(9, 3, 64, 64, False, 0, 37, id="smollm2-9x3x64-empty-37"),
    pytest.param(8, 2, 128, 128, False, 21, 20, id="gqa4-8x2x128-at21"),
    pytest.param(7, 1, 37, 20, False, 5, 12, id="mqa-7x37-rot20-at5"),
    pytest.param(6, 2, 33, 32, True, 16, 17, id="neox-6x2x33-at16"),
]


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot, neox, p0, n", CASES)
def test_tiled_attention_matches_float64(backend, n_head, n_head_kv, head_dim, n_rot, neox, p0, n):
    """A chunk of n queries at p0 .. p0+n-1 over a cache holding p0 keys:
    its keys and values appended (rotated keys), later positions untouched,
    and every query's causal attention over positions 0 .. its own."""
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=p0 + n + 9, neox=neox)
    freqs = inv_freq(n_rot, base=500.0)
    r = np.random.default_rng(head_dim + p0)
    old_k, old_v = older_rows(r, shape, p0)
    q, k, v, qkv = step_inputs(r, shape, n)
    k_c, v_c = caches(backend, shape, old_k, old_v)
    got, _ = run_chunk(backend, shape, qkv, p0, k_c, v_c, freqs)

    k_rot = rope64(k, np.arange(p0, p0 + n), freqs, n_rot, neox)
    k_cache, v_cache = cached(k_c, shape), cached(v_c, shape)
    assert np.array_equal(k_cache[:, :p0], old_k.transpose(1, 0, 2)), "older positions untouched"
    assert ref.nmse(k_cache[:, p0:p0 + n].transpose(1, 0, 2), k_rot) < NMSE_F32
    assert np.array_equal(v_cache[:, p0:p0 + n], v.transpose(1, 0, 2))
    assert np.isnan(k_cache[:, p0 + n:]).all() and np.isnan(v_cache[:, p0 + n:]).all()
    assert np.isfinite(got).all()
    assert ref.nmse(got, expected64(shape, freqs, q, k, v, old_k, old_v, p0)) < NMSE_F32


def test_a_query_gives_the_same_bits_in_any_chunk(backend):
    """Tokens 0..99 as one chunk of 100 on an empty cache; then, on a cache
    holding that run's first 50 keys and values, tokens 50..86 as a chunk of
    37; then token 86 alone on the cache of 0..85: the overlap's outputs are
    the same bits (other places in the query tile, other tiles around them)."""
    shape = AttentionShape(9, 3, 64, 64, capacity=110)
    freqs = inv_freq(64)
    _, _, _, qkv = step_inputs(np.random.default_rng(7), shape, 100)
    nothing = np.zeros((0, 3, 64), np.float32)
    k_c, v_c = caches(backend, shape, nothing, nothing)
    whole, _ = run_chunk(backend, shape, qkv, 0, k_c, v_c, freqs)
    for p0, n in ((50, 37), (86, 1)):
        part, k_part = chunk_again(backend, shape, qkv, k_c, v_c, freqs, p0, n)
        assert np.array_equal(cached(k_part, shape)[:, :p0 + n], cached(k_c, shape)[:, :p0 + n])
        assert part.tobytes() == whole[p0:p0 + n].tobytes(), (p0, n)


def test_tiled_attention_is_close_to_attention(backend):
    """The same chunk through vector_ops.Attention (a query per workgroup,
    a scores scratch): the same caches, outputs apart by float32 rounding."""
    shape = AttentionShape(9, 3, 64, 64, capacity=80)
    freqs = inv_freq(64)
    r = np.random.default_rng(3)
    p0, n = 30, 40
    old = r.standard_normal((p0, 3, 64)).astype(np.float32)
    _, _, _, qkv = step_inputs(r, shape, n)
    k_c, v_c = caches(backend, shape, old, old[::-1].copy())
    got, _ = run_chunk(backend, shape, qkv, p0, k_c, v_c, freqs)

    k_a, v_a = caches(backend, shape, old, old[::-1].copy())
    qd = 9 * 64
    t = backend.tensor(qkv.shape[1], n)
    t.write(qkv)
    out = backend.tensor(qd, n)
    g = backend.graph()
    g.add(Attention(backend.device, shape, *qkv_parts(t, shape), k_a, v_a, upload(backend, rope_table(freqs, 80)),
                    upload(backend, np.arange(p0, p0 + n), np.int32),
                    zeros(backend, attention_scratch_size(backend.device, shape, None, n)), Vectors(out, qd), n=n))
    g.output(out)
    g.output(k_a)
    g.run()
    assert cached(k_a, shape).tobytes() == cached(k_c, shape).tobytes(), "one append: the same cache bits"
    assert ref.nmse(got, out.read().reshape(n, 9, 64)) < 1e-10


def test_tile_shapes_keep_the_bits(backend):
    """The GPU's ways (K/V tiles through shared memory, with barriers; a row
    over 2, 4 or 8 invocations, some of them holding no value of its head
    at head_dim 20) on this device, and other ways of spreading rows over
    invocations (a row per invocation, several heads and queries per
    invocation, more queries per workgroup), the caches read as storage or
    as texels: float64's results, and at one key tile the same bits."""
    shape = AttentionShape(6, 2, 20, 20, capacity=60)
    freqs = inv_freq(20)
    r = np.random.default_rng(11)
    p0, n = 13, 30
    old = r.standard_normal((p0, 2, 20)).astype(np.float32)
    q, k, v, qkv = step_inputs(r, shape, n)
    outs = []
    for t in (AttentionTiles(4, 8, 1, True), AttentionTiles(2, 8, 3, True), AttentionTiles(8, 8, 3, False),
              AttentionTiles(16, 8, 3, False, 3, 4), AttentionTiles(8, 8, 3, True, 1, 2),
              AttentionTiles(16, 8, 3, False, 3, 4, texel_kv=True), AttentionTiles(4, 8, 1, True, row_lanes=2),
              AttentionTiles(8, 8, 3, True, row_lanes=4), AttentionTiles(2, 8, 3, True, row_lanes=8)):
        k_c, v_c = caches(backend, shape, old, -old)
        outs.append(run_chunk(backend, shape, qkv, p0, k_c, v_c, freqs, tiles=t)[0])
    assert ref.nmse(outs[0], expected64(shape, freqs, q, k, v, old, -old, p0)) < NMSE_F32
    assert all(o.tobytes() == outs[0].tobytes() for o in outs[1:])


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot, neox, split", [
    pytest.param(7, 1, 37, 20, False, 0, id="mqa-7x37-rot20"),
    pytest.param(6, 2, 33, 32, True, 8, id="neox-6x2x33-split8"),
])
def test_rows_over_invocations_keep_the_bits(backend, n_head, n_head_kv, head_dim, n_rot, neox, split):
    """A row over 4 invocations (a GPU's way) at head_dims of partial vec4s,
    in both RoPE modes, with and without splits of the keys: the same bits
    as a row per invocation at the same key tile."""
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=40, neox=neox)
    freqs = inv_freq(n_rot)
    r = np.random.default_rng(head_dim)
    p0, n = 9, 21
    old_k, old_v = older_rows(r, shape, p0)
    _, _, _, qkv = step_inputs(r, shape, n)
    outs = []
    for t in (AttentionTiles(8, 8, 1, False), AttentionTiles(8, 8, 1, True, row_lanes=4)):
        k_c, v_c = caches(backend, shape, old_k, old_v)
        outs.append(run_chunk(backend, shape, qkv, p0, k_c, v_c, freqs, tiles=t, split=split)[0])
    assert np.isfinite(outs[0]).all() and outs[1].tobytes() == outs[0].tobytes()


def test_tiled_attention_launches(backend):
    """Two dispatches (append, attend), the attend's workgroups (query-head
    groups, query tiles) and its depth one step per key tile; a GPU's tiles
    keep their shared memory within GPU_SHARED_BYTES, and spread a row of
    a head_dim past 4 * GPU_LANE_VEC4S over invocations."""
    shape = AttentionShape(9, 3, 64, 64, capacity=100)
    _, _, _, qkv = step_inputs(np.random.default_rng(1), shape, 37)
    k_c, v_c = caches(backend, shape, np.zeros((0, 3, 64), np.float32), np.zeros((0, 3, 64), np.float32))
    _, op = run_chunk(backend, shape, qkv, 0, k_c, v_c, inv_freq(64))
    append, attend = op.launches
    assert append.groups == (3, 1, 37)
    tiles = op.tiles
    assert attend.groups == (9 // tiles.heads, -(-37 // tiles.bq), 1)
    assert attend.invocations == tiles.bq * tiles.heads // (tiles.lane_heads * tiles.lane_queries)
    assert attend.depth == 1 + -(-100 // tiles.bkv) + (0 if tiles.shared_kv else 200)
    for hd in (64, 80, 128, 256, 37):
        gpu = attention_tiles(launches_of(backend.device, "nvidia"), AttentionShape(8, 2, hd, hd // 2 * 2, 4096))
        assert gpu.shared_kv and gpu.shared_bytes(hd) <= GPU_SHARED_BYTES and gpu.wg_size <= GPU_INVOCATIONS
        assert gpu.row_lanes * GPU_LANE_VEC4S >= min(-(-hd // 4), GPU_ROW_LANES * GPU_LANE_VEC4S), gpu
        assert gpu.bkv % gpu.row_lanes == 0 and gpu.bq * gpu.heads * gpu.row_lanes == gpu.wg_size


def test_tiled_attention_refuses(backend):
    shape = AttentionShape(6, 2, 8, 8, capacity=20)
    qd = 6 * 8
    t = backend.tensor(qd + 2 * 16, 4)
    k_c, v_c = zeros(backend, shape.cache_size), zeros(backend, shape.cache_size)
    table, pos, out = zeros(backend, 20 * 8), upload(backend, np.arange(4), np.int32), backend.tensor(qd, 4)

    def make(shape=shape, n=4, tiles=None, pos=pos, k_c=k_c, v_c=v_c, split=None, table=table):
        return TiledAttention(backend.device, shape, *qkv_parts(t, shape), k_c, v_c, table, pos, Vectors(out, qd),
                              n, tiles=tiles, split=split)

    make()
    with pytest.raises(ValueError, match="5 vector"):
        make(n=5)
    with pytest.raises(ValueError, match="0 queries"):
        make(n=0)
    with pytest.raises(ValueError, match="heads must divide the 3 query heads"):
        make(tiles=AttentionTiles(8, 16, 2, False))
    with pytest.raises(ValueError, match="lane_queries divide bq"):
        make(tiles=AttentionTiles(8, 16, 3, False, 1, 3))
    for tiles in (AttentionTiles(8, 16, 3, False, row_lanes=2), AttentionTiles(8, 16, 3, True, 3, row_lanes=2),
                  AttentionTiles(8, 6, 3, True, row_lanes=4)):
        with pytest.raises(ValueError, match="row_lanes > 1 needs shared_kv"):
            make(tiles=tiles)
    with pytest.raises(ValueError, match="int32 positions"):
        make(pos=zeros(backend, 4))
    with pytest.raises(ValueError, match=r"the K cache holds \d+ values; .* needs 320"):
        make(k_c=zeros(backend, 10))
    with pytest.raises(ValueError, match="split 12: a multiple of the 8 keys per tile"):
        make(tiles=AttentionTiles(8, 8, 3, False), split=12)
    if backend.device.caps.max_loop_iterations is not None:
        budget = backend.device.caps.max_loop_iterations
        long = AttentionShape(6, 2, 8, 8, capacity=budget + 1)
        caches_ = zeros(backend, long.cache_size)
        with pytest.raises(ValueError, match="at most 13106 positions"):
            make(shape=long, k_c=caches_, v_c=caches_, tiles=AttentionTiles(8, 1, 3, False), split=13107)
        # (5 iterations per position with a key per tile: 13,106 positions within the budget, then a split)
        assert make(shape=long, k_c=caches_, v_c=caches_, tiles=AttentionTiles(8, 1, 3, False),
                    table=zeros(backend, long.capacity * 8)).split == 13106


def test_texel_caches_need_whole_vec4_heads(backend):
    """texel_kv reads a head as vec4 texels: a head_dim of 6 is refused
    before anything is recorded, and attention_tiles never picks it there."""
    shape = AttentionShape(2, 1, 6, 6, capacity=8)
    qkv = backend.tensor(4 * 6, 2)
    k_c, v_c = zeros(backend, shape.cache_size), zeros(backend, shape.cache_size)
    out = backend.tensor(12, 2)
    with pytest.raises(ValueError, match="texel_kv needs .* a head_dim that is a multiple of 4"):
        TiledAttention(backend.device, shape, *qkv_parts(qkv, shape), k_c, v_c, zeros(backend, 8 * 6),
                       upload(backend, np.arange(2), np.int32), Vectors(out, 12), 2,
                       tiles=AttentionTiles(8, 8, 2, False, texel_kv=True))
    assert not attention_tiles(backend.device, shape).texel_kv


@pytest.mark.parametrize("split", [16, 32])
def test_split_positions(backend, split):
    """Forced splits of the keys over workgroups, combined by a second
    dispatch: float64's results across split edges, and a query's bits the
    same in a chunk of 100 from 0 and one of 37 from 50."""
    shape = AttentionShape(9, 3, 64, 64, capacity=110)
    freqs = inv_freq(64)
    q, k, v, qkv = step_inputs(np.random.default_rng(5), shape, 100)
    nothing = np.zeros((0, 3, 64), np.float32)
    k_c, v_c = caches(backend, shape, nothing, nothing)
    whole, op = run_chunk(backend, shape, qkv, 0, k_c, v_c, freqs, split=split)
    assert op.split == split and len(op.launches) == 3
    assert ref.nmse(whole, expected64(shape, freqs, q, k, v, nothing, nothing, 0)) < NMSE_F32
    part, _ = chunk_again(backend, shape, qkv, k_c, v_c, freqs, 50, 37, split=split)
    assert part.tobytes() == whole[50:87].tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("n_head, n_head_kv, head_dim, positions", [
    pytest.param(9, 3, 64, 8192, id="smollm2-9x3x64-8192"),
    pytest.param(4, 2, 256, 4100, id="4x2x256-4100"),
    pytest.param(9, 3, 64, 33000, id="smollm2-9x3x64-33000-split"),
])
def test_tiled_attention_at_long_positions(backend, n_head, n_head_kv, head_dim, positions):
    """A chunk of 8 queries ending at position positions - 1: far past where
    lavapipe's loop budget would cut the loops over a head's values, were
    they not unrolled (at ~2,000 positions at head_dim 64); past 29,957
    positions, split in two (tiled_attention_loop_iterations)."""
    n = 8
    p0 = positions - n
    shape = AttentionShape(n_head, n_head_kv, head_dim, head_dim, capacity=positions)
    freqs = inv_freq(head_dim)
    r = np.random.default_rng(positions)
    old_k, old_v = older_rows(r, shape, p0)
    q, k, v, qkv = step_inputs(r, shape, n)
    k_c, v_c = caches(backend, shape, old_k, old_v)
    got, op = run_chunk(backend, shape, qkv, p0, k_c, v_c, freqs)
    budget = backend.device.caps.max_loop_iterations
    assert op.split == (0 if budget is None or tiled_attention_loop_iterations(positions, 16) <= budget else 29952)
    assert ref.nmse(got, expected64(shape, freqs, q, k, v, old_k, old_v, p0)) < 1e-10
