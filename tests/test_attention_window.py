"""Sliding windows, soft-capped scores and a query scale of their own in the
attention ops (vkq.llama.vector_ops.Attention, vkq.llama.chunk_attention.
TiledAttention; Gemma's), the soft-capped logits (SoftCap) and GeGLU
(SwiGLU's gelu), against float64 numpy.

A query at position p of a window W sees the keys p - W + 1 .. p, never
one before: the caches hold NaN at every position no query of the case may
see (a key read there would make its output NaN) and at those not yet
written, and every output is compared with the float64 attention over
exactly its window. Windows of 1, 4 and 16 positions, queries at the
window's edges (p = W - 2 .. W + 1) and far past it, one at a time (a
decode step) and in chunks, with the positions of a head in one workgroup
or split over several (the split's edges inside and outside the window),
and a context of 300 positions (a few cases in the default suite, the rest
slow). Soft-capping stays finite for any logit, infinities included.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkq.blocks.reference as ref
from test_chunk_attention import rope64
from test_llama_ops import NMSE_F32, inv_freq, qkv_parts, run, step_inputs, upload
from vkq.llama.chunk_attention import TiledAttention, attention_tiles
from vkq.llama.host import gelu, soft_cap
from vkq.llama.vector_ops import (Attention, AttentionShape, SoftCap, SwiGLU, Vectors, attention_scratch_size,
                                  rope_table)

SOFTCAP, SCALE = 3.0, 0.3  # a cap the scores reach, and not 1 / sqrt(head_dim)


def windowed64(shape: AttentionShape, q, keys, values, positions, sinks=None):
    """float64 attention of queries q (n, H, hd) at `positions` over keys/values (T, Hkv, hd),
    each over its window only (shape.window; 0: every position up to its own), scaled and capped as shape says;
    sinks (H,): each head's sink in its softmax's denominator."""
    out = np.zeros(q.shape, np.float64)
    group = shape.n_head // shape.n_head_kv
    for i, p in enumerate(positions):
        first = max(0, p + 1 - shape.window) if shape.window else 0
        for h in range(shape.n_head):
            s = keys[first:p + 1, h // group] @ q[i, h] * shape.query_scale
            if shape.softcap:
                s = shape.softcap * np.tanh(s / shape.softcap)
            top = s.max() if sinks is None else max(s.max(), sinks[h])
            e = np.exp(s - top)
            total = e.sum() + (0.0 if sinks is None else np.exp(sinks[h] - top))
            out[i, h] = (e / total) @ values[first:p + 1, h // group]
    return out


def poisoned_caches(backend, shape: AttentionShape, keys, values, p0: int, n: int):
    """K/V caches holding keys/values (p0, Hkv, hd) at positions 0 .. p0 - 1,
    NaN before the first position any of the n queries at p0 .. p0 + n - 1
    sees (and after p0: not written yet)."""
    first = max(0, p0 + 1 - shape.window) if shape.window else 0

    def lay(x):
        c = np.full((shape.n_head_kv, shape.capacity, shape.head_dim), np.nan, np.float32)
        c[:, first:p0] = x[first:p0].transpose(1, 0, 2)
        return c
    return upload(backend, lay(keys)), upload(backend, lay(values))


def attend(backend, shape, p0, n, tiled=False, split=None, seed=0, tiles=None, sinks=None):
    """n queries at p0 .. p0 + n - 1 (each a decode step of its own, or one
    chunk: tiled, or Attention over n > 1) on poisoned caches, with the
    heads' sinks where given: (out, expected)."""
    r = np.random.default_rng(seed)
    sink_t = None if sinks is None else upload(backend, sinks)
    old = [r.standard_normal((p0, shape.n_head_kv, shape.head_dim)).astype(np.float32) for _ in "kv"]
    q, k, v, qkv = step_inputs(r, shape, n)
    freqs = inv_freq(shape.n_rot, base=500.0)
    positions = np.arange(p0, p0 + n)
    k_c, v_c = poisoned_caches(backend, shape, *old, p0, n)
    qd = shape.n_head * shape.head_dim
    t = backend.tensor(qkv.shape[1], n)
    t.write(qkv)
    out = backend.tensor(qd, n)
    table = upload(backend, rope_table(freqs, shape.capacity))
    pos = upload(backend, positions, np.int32)
    if tiled:
        op = TiledAttention(backend.device, shape, *qkv_parts(t, shape), k_c, v_c, table, pos, Vectors(out, qd), n,
                            split=split, tiles=tiles, sinks=sink_t)
    else:
        scores = backend.tensor(attention_scratch_size(backend.device, shape, split, n))
        op = Attention(backend.device, shape, *qkv_parts(t, shape), k_c, v_c, table, pos, scores, Vectors(out, qd),
                       split=split, n=n, sinks=sink_t)
    run(backend, [op], [out, k_c, v_c])
    keys = np.concatenate([old[0], rope64(k, positions, freqs, shape.n_rot, shape.neox)])
    values = np.concatenate([old[1], v]).astype(np.float64)
    want = windowed64(shape, rope64(q, positions, freqs, shape.n_rot, shape.neox), keys, values, positions, sinks)
    return out.read().reshape(n, shape.n_head, shape.head_dim), want


def shape_of(window, capacity=80, **kw):
    return AttentionShape(4, 2, 32, 32, capacity, neox=True, window=window, softcap=SOFTCAP, scale=SCALE, **kw)


@pytest.mark.parametrize("window, split", [
    pytest.param(w, s, marks=() if (w, s) in ((4, 0), (4, 3)) else pytest.mark.slow)
    for w in (1, 4, 16) for s in (0, 3, 8)])
def test_a_decode_step_sees_its_window_only(backend, window, split):
    """One query at each position around the window's edge and past it: its
    own window of keys, whatever the split (0: one workgroup per head; 3 and
    8 positions per workgroup, whose splits before the window do nothing)."""
    shape = shape_of(window)
    for p0 in sorted({max(0, window - 2), window - 1, window, window + 1, 3 * window + 5}):
        got, want = attend(backend, shape, p0, 1, split=split, seed=p0)
        assert np.isfinite(got).all(), (p0, "a key outside the window was read")
        assert ref.nmse(got, want) < NMSE_F32, p0


@pytest.mark.parametrize("window, p0, n, kind", [
    pytest.param(*case, kind, marks=() if case == (4, 2, 5) else pytest.mark.slow)
    for case in ((4, 0, 9), (4, 2, 5), (16, 10, 12), (1, 3, 4), (5, 280, 7)) for kind in ("attention", "tiled")])
def test_a_chunk_sees_each_query_s_window_only(backend, window, p0, n, kind):
    """A chunk of n queries from p0 (across the window's edge, and at 280 of
    300 positions): every query over its own window, the chunk's keys in the
    caches as they come; through Attention (a query per workgroup) and
    through TiledAttention (key tiles that start before a window, or lie
    wholly before a query's)."""
    shape = shape_of(window, capacity=300)
    got, want = attend(backend, shape, p0, n, tiled=kind == "tiled", seed=p0 + n)
    assert np.isfinite(got).all(), "a key outside a window was read"
    assert ref.nmse(got, want) < NMSE_F32


@pytest.mark.slow
def test_tiled_windows_in_tiles_and_splits(backend):
    """TiledAttention with tiles of 4 keys and 2 queries, and splits of 8
    positions: windows that begin inside a tile and splits wholly before a
    window (their partial results weigh nothing)."""
    shape = shape_of(6, capacity=64)
    tiles = dataclasses.replace(attention_tiles(backend.device, shape), bq=2, bkv=4, lane_queries=1)
    for split in (0, 8):
        got, want = attend(backend, shape, 21, 9, tiled=True, split=split, tiles=tiles, seed=split)
        assert np.isfinite(got).all() and ref.nmse(got, want) < NMSE_F32, split


SINKS = np.array([2.0, -1.0, 0.5, 30.0], np.float32)  # a sink per head: one outweighs every score


@pytest.mark.parametrize("kind, split", [
    pytest.param(k, s, marks=() if (k, s) in (("decode", 3), ("tiled", 0)) else pytest.mark.slow)
    for k, s in (("decode", 0), ("decode", 3), ("attention", 0), ("tiled", 0), ("tiled", 8))])
def test_sinks_with_windows(backend, kind, split):
    """gpt-oss's attention sinks (a logit per query head in the softmax's
    denominator) with a sliding window of 4 (gpt-oss slides too): a decode
    step (one workgroup per head, or splits whose combine takes the sink),
    a chunk through Attention and through TiledAttention (the online
    softmax starts from the sink; with splits the combine takes it),
    against float64; a sink of 30 leaves its head's output near 0."""
    shape = dataclasses.replace(shape_of(4, capacity=64), softcap=0.0)
    n = 1 if kind == "decode" else 9
    got, want = attend(backend, shape, 11, n, tiled=kind == "tiled", split=split or None, seed=5, sinks=SINKS,
                       tiles=dataclasses.replace(attention_tiles(backend.device, shape), bq=2, bkv=4, lane_queries=1)
                       if kind == "tiled" else None)
    assert np.isfinite(got).all() and ref.nmse(got, want) < NMSE_F32
    assert np.abs(got[:, 3]).max() < 1e-9 < np.abs(got[:, 0]).max()


def test_soft_cap_is_finite_for_any_logit(backend):
    """SoftCap in place on logits that reach the cap, pass it by far, or are
    infinite: c * tanh(x / c), within float32 rounding of float64, and never
    more than c in size; NaN stays NaN. The host's soft_cap too."""
    cap = 30.0
    values = np.array([0.0, 1e-30, -2.5, 29.0, 31.0, 88.0, -700.0, 1e30, -1e38, 3.4e38, np.inf, -np.inf, np.nan],
                      np.float32)
    x = backend.tensor(values.size, 2)
    x.write(np.stack([values, values[::-1]]))
    run(backend, [SoftCap(backend.device, Vectors(x, values.size), cap, 2)], [x])
    got = x.read()
    want = cap * np.tanh(np.stack([values, values[::-1]]).astype(np.float64) / cap)
    finite = ~np.isnan(want)
    assert np.array_equal(np.isnan(got), ~finite)
    assert np.all(np.abs(got[finite]) <= cap) and np.allclose(got[finite], want[finite], rtol=1e-6, atol=1e-5)
    host = soft_cap(values, cap)
    assert np.array_equal(np.isnan(host), np.isnan(values)) and np.all(np.abs(host[~np.isnan(values)]) <= cap)


def test_soft_capped_scores_are_finite_for_huge_scores(backend):
    """Scores of 1e30 and more (queries and keys of 1e15): capped, the
    attention's output is finite and the float64 one."""
    shape = shape_of(0, capacity=12)
    r = np.random.default_rng(3)
    _, _, _, qkv = step_inputs(r, shape, 1)
    qkv *= np.float32(1e15)
    qkv[:, shape.n_head * shape.head_dim + shape.n_head_kv * shape.head_dim:] /= np.float32(1e15)  # v as it was
    qd = shape.n_head * shape.head_dim
    t = backend.tensor(qkv.shape[1])
    t.write(qkv)
    k_c, v_c = (upload(backend, np.zeros(shape.cache_size, np.float32)) for _ in "kv")
    out = backend.tensor(qd)
    scores = backend.tensor(attention_scratch_size(backend.device, shape, None, 1))
    run(backend, [Attention(backend.device, shape, *qkv_parts(t, shape), k_c, v_c,
                            upload(backend, rope_table(inv_freq(32), 12)), upload(backend, [0], np.int32), scores,
                            Vectors(out, qd))], [out])
    got = out.read()
    # One key (position 0): its value, whatever the score.
    v = qkv[0, qd + shape.n_head_kv * shape.head_dim:qd + 2 * shape.n_head_kv * shape.head_dim]
    assert np.isfinite(got).all()
    assert np.allclose(got.reshape(shape.n_head, -1), np.repeat(v.reshape(shape.n_head_kv, -1), 2, axis=0))


def test_geglu_against_float64(backend):
    """SwiGLU's GELU variant (GeGLU): gelu(gate) * up, ggml's tanh
    approximation, over gates from -1e4 to 1e4 (tanh of a large argument
    stays finite): within float32 rounding of float64, as the host's gelu."""
    r = np.random.default_rng(1)
    n, length = 3, 100
    gate = (r.standard_normal((n, length)) * np.array([0.5, 4.0, 1e3])[:, None]).astype(np.float32)
    gate[:, :4] = [1e4, -1e4, 30.0, -30.0]
    up = r.standard_normal((n, length)).astype(np.float32)
    g, u, out = backend.tensor(length, n), backend.tensor(length, n), backend.tensor(length, n)
    g.write(gate)
    u.write(up)
    run(backend, [SwiGLU(backend.device, Vectors(g, length), Vectors(u, length), Vectors(out, length), n,
                         glu="gelu")], [out])
    x = gate.astype(np.float64)
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))) * up
    got = out.read()
    assert np.isfinite(got).all()
    assert ref.nmse(got, want) < NMSE_F32 and ref.nmse(gelu(gate) * up, want) < NMSE_F32


def test_soft_cap_gpu_launch(backend):
    """SoftCap with NVIDIA's launches over Gemma's 256,000 logits: a value per
    invocation (depth 1), every value its own invocation."""
    from vkq.llama.vector_ops import SOFT_CAP_WG, launches_of, soft_cap_depth

    dev = launches_of(backend.device, "nvidia")
    (launch,) = SoftCap(dev, Vectors(backend.tensor(256000), 256000), 30.0).launches
    assert launch.depth == soft_cap_depth() == 1 and launch.invocations == SOFT_CAP_WG
    assert launch.groups[0] * SOFT_CAP_WG >= 256000 and launch.groups[1:] == (1, 1)


@pytest.mark.parametrize("sinks", [None, SINKS])
@pytest.mark.parametrize("split", [0, 8])
def test_spread_rows_see_their_window_only(backend, sinks, split):
    """A GPU's tiles (forced here): K/V tiles in shared memory and a row
    spread over 2 invocations (row_lanes), keys 4 a tile: windows of 4,
    soft-capped scores, sinks (the online softmax's start, or the combine's
    with splits of 8), against float64, never a key outside a window."""
    shape = shape_of(4, capacity=64)
    base = attention_tiles(backend.device, shape)
    tiles = dataclasses.replace(base, bq=2, bkv=4, shared_kv=True, row_lanes=2, lane_queries=1, lane_heads=1,
                                texel_kv=False)
    got, want = attend(backend, shape, 11, 9, tiled=True, split=split or None, tiles=tiles, seed=split, sinks=sinks)
    assert np.isfinite(got).all() and ref.nmse(got, want) < NMSE_F32
