"""The vector ops of a llama decode step (vkq.llama.vector_ops) against float64 numpy.

Odd sizes throughout: odd vector lengths, odd head counts and GQA ratios,
head_dim 64 and odd ones, RoPE over part of a head, a context of 1 and of
several hundred positions, attention steps one after another, vectors at
offsets and strides inside bigger tensors (the parts of a stacked mat-vec's
output). Every block type's embedding rows, on one buffer and split over
several. The bounds are far below what a wrong index or formula gives
(NMSE ~1e-2 and up) and far above float32 rounding (1e-14).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import ggml_quant
import vkq.blocks.reference as ref
from conftest import TYPES, force_split
from vkq.blocks.formats import FORMATS
from vkq.llama.vector_ops import (RMS_NORM_GPU_WG, Argmax, Attention, AttentionShape, EmbedRows, ExpertRouting,
                                  HeadNorm, Q8_1Output, RMSNorm, SwiGLU, Vectors, attention_launch,
                                  attention_scratch_size, attention_split, launches_of, rms_norm_depth, rope_table)
from vkq.ops import QuantizeQ8_1, q8_1_words

NMSE_F32 = 1e-12  # float32 arithmetic against float64


def run(backend, ops, outputs=()):
    """The ops in one graph (vkq.Graph): its barriers come from the ops'
    reads and writes, so a wrong declaration shows here as a wrong result."""
    g = backend.graph()
    for op in ops:
        g.add(op)
    for t in outputs:
        g.output(t)
    g.run()


def upload(backend, values, dtype=np.float32):
    """A tensor of these values (one vector), on the device at the first replay."""
    values = np.ascontiguousarray(values, dtype).reshape(-1)
    t = backend.tensor(values.size, dtype=dtype)
    t.write(values)
    return t


def zeros(backend, n, dtype=np.float32):
    return backend.tensor(n, dtype=dtype)


def rng(seed=0):
    return np.random.default_rng(seed)


@pytest.fixture(params=["subgroup", "shared"])
def reduction(request, backend, monkeypatch):
    """RMSNorm and Attention reduce with subgroup arithmetic (one subgroup per
    workgroup) where the device has it, else with a shared-memory tree: both."""
    caps = backend.device.caps
    if request.param == "subgroup":
        if not caps.subgroup_arithmetic:
            pytest.skip("this device has no subgroup arithmetic")
    else:
        monkeypatch.setattr(backend.device, "caps", replace(caps, subgroup_arithmetic=False))
    return request.param


# -- embedding rows ----------------------------------------------------------------

def embed_case(backend, qtype, rows, ids, stride_extra=32):
    fmt = FORMATS[qtype]
    k = 70 if fmt.is_plain else 2 * fmt.block_elems  # plain types: a row padded on the device
    data = ggml_quant.random_weights(rows, k, qtype, seed=rows)
    w = backend.upload(qtype, (rows, k), data)
    want = ref.dequantize(qtype, (rows, k), data)[ids]
    stride = w.layout.k_padded + stride_extra
    n = len(ids)
    ids_t = upload(backend, ids, np.int32)
    out = zeros(backend, n * stride)
    run(backend, [EmbedRows(backend.device, w, ids_t, Vectors(out, k, 0, stride), n)], outputs=[out])
    got = out.read().reshape(n, stride)
    for v in range(n):
        e = ref.nmse(got[v, :k], want[v])
        assert e < NMSE_F32, f"{qtype} row {ids[v]}: NMSE {e:.3g}"
        assert not got[v, k:].any(), "values past the row (padding and stride) stay zero"
    return w


@pytest.mark.parametrize("qtype", TYPES)
def test_embed_rows_every_type(backend, qtype):
    embed_case(backend, qtype, rows=37, ids=np.array([0, 36, 17, 17, 5], np.int32))


def test_embed_rows_of_a_split_matrix(backend, monkeypatch):
    force_split(monkeypatch, "Q4_1", 1, 5, 64)
    w = embed_case(backend, "Q4_1", rows=37, ids=np.array([36, 0, 4, 5, 20, 35], np.int32))
    assert len(w.buffers) == 8


def test_embed_rows_refuses_bad_output(backend):
    w = backend.upload("Q8_0", (3, 64), ggml_quant.random_weights(3, 64, "Q8_0"))
    ids = upload(backend, [0], np.int32)
    with pytest.raises(ValueError, match="need 160 elements; the tensor has 128"):
        EmbedRows(backend.device, w, ids, Vectors(zeros(backend, 100), 64, 0, 96), 2)  # (100 padded to 128)
    with pytest.raises(ValueError, match="from element 0"):
        EmbedRows(backend.device, w, ids, Vectors(zeros(backend, 200), 64, 4, 96), 1)


# -- RMSNorm -----------------------------------------------------------------------

@pytest.mark.parametrize("length, off, stride, y_stride", [(333, 5, 340, 352), (576, 4, 580, 576)],
                         ids=["unaligned", "vec4-aligned"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_rms_norm(backend, residual, reduction, length, off, stride, y_stride):
    """Vectors at an offset and stride, read and written four values at a
    time where every one starts on a whole vec4, else one at a time."""
    n, eps = 3, 1e-5
    r = rng(1)
    # x: vectors of values with an outlier 90x the RMS (like SmolLM2's)
    x_host = np.zeros(off + n * stride, np.float32)
    xs = r.standard_normal((n, length)).astype(np.float32)
    xs[:, 7] *= 90
    for v in range(n):
        x_host[off + v * stride: off + v * stride + length] = xs[v]
    res = r.standard_normal((n, length)).astype(np.float32)
    w = (1 + 0.1 * r.standard_normal(length)).astype(np.float32)
    x_t, w_t, res_t = upload(backend, x_host), upload(backend, w), upload(backend, res)
    y_t = zeros(backend, n * y_stride + 32)
    op = RMSNorm(backend.device, Vectors(x_t, length, off, stride), w_t, Vectors(y_t, length, 0, y_stride), eps, n,
                 residual=Vectors(res_t, length, 0, length) if residual else None)
    assert (x_t in op.writes) == residual
    run(backend, [op], outputs=[x_t, y_t])
    x_new = x_t.read()[off:][: n * stride].reshape(n, stride)[:, :length]
    assert not x_t.read()[:off].any() and not x_t.read().reshape(-1)[off:][: n * stride].reshape(
        n, stride)[:, length:].any(), "nothing written between the vectors"
    want_x = (xs + res) if residual else xs  # float32 adds, as the reference decoder does them
    assert np.array_equal(x_new, want_x)
    x64 = want_x.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w
    got = y_t.read()[: n * y_stride].reshape(n, y_stride)
    assert ref.nmse(got[:, :length], want) < NMSE_F32
    assert not got[:, length:].any() and not y_t.read()[n * y_stride:].any()


@pytest.mark.parametrize("length", [333, 352], ids=["unaligned", "vec4-aligned"])  # 11 blocks
@pytest.mark.parametrize("workgroups", [2, 3, 11])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_rms_norm_spread_over_workgroups(backend, residual, workgroups, reduction, length):
    """A vector spread over workgroups (as on a GPU: each reads the whole
    vector for its sum, then takes its blocks): the bits of one workgroup's,
    x + residual written to x_out, y's Q8_1 blocks those of y."""
    n, eps = 3, 1e-5
    r = rng(7)
    xs = (r.standard_normal((n, length)) * 3).astype(np.float32)
    rs = r.standard_normal((n, length)).astype(np.float32)
    res = upload(backend, rs)
    w = (1 + 0.1 * r.standard_normal(length)).astype(np.float32)
    w_t = upload(backend, w)
    outs = []
    for wgs in (1, workgroups):
        x, y, x_out = upload(backend, xs), backend.tensor(length, n), backend.tensor(length, n)
        xq = Q8_1Output(backend.tensor(q8_1_words(1, y.stride, 2), n, dtype=np.uint32), 2)
        op = RMSNorm(backend.device, Vectors(x, length, 0, length), w_t, Vectors(y, length), eps, n,
                     residual=Vectors(res, length, 0, length) if residual else None, xq=xq,
                     x_out=Vectors(x_out, length) if residual else None, workgroups=wgs)
        assert op.workgroups == wgs
        run(backend, [op], outputs=[y, x_out, xq.xq])
        outs.append((y.read(), x_out.read(), xq.xq.read()))
    (y1, xo1, q1), (y2, xo2, q2) = outs
    assert y1.tobytes() == y2.tobytes() and q1.tobytes() == q2.tobytes()
    if residual:
        assert np.array_equal(xo2, xs + rs) and xo1.tobytes() == xo2.tobytes()
    x64 = (xs + rs if residual else xs).astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w
    assert ref.nmse(y2, want) < NMSE_F32


GPU_DEPTH_BOUND = 16  # dependent global loads per invocation a GPU step's ops may take (issue 47)


@pytest.mark.parametrize("length", [576, 2048, 4096, 4100], ids=["smollm2", "1b", "8b", "8b+4"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_rms_norm_gpu_launch(backend, residual, reduction, length):
    """A GPU's launch (NVIDIA's, forced: LaunchesOf): a workgroup of
    RMS_NORM_GPU_WG invocations per 512 values of a vector (4100: 129
    blocks, 9 workgroups of 15 blocks but the last of 9), each summing the
    whole vector in the same fixed tree and scaling its slice, x + residual
    to x_out by each slice's owner (the workgroups all run at once on this
    device too): against float64, x + residual kept exactly and x untouched;
    the bits of one workgroup per vector, y, x_out and the Q8_1 blocks; a
    chunk of 3 vectors gives the bits of each alone."""
    dev = launches_of(backend.device, "nvidia")
    n, eps = 3, 1e-5
    r = rng(11)
    xs = (r.standard_normal((n, length)) * 3).astype(np.float32)
    xs[:, 7] *= 90
    rs = r.standard_normal((n, length)).astype(np.float32)
    w = (1 + 0.1 * r.standard_normal(length)).astype(np.float32)
    w_t = upload(backend, w)
    spread = -(-length // 512)

    def norm(v0, count, workgroups=None):
        x, res = upload(backend, xs[v0:v0 + count]), upload(backend, rs[v0:v0 + count])
        y, x_out = backend.tensor(length, count), backend.tensor(length, count)
        xq = Q8_1Output(backend.tensor(q8_1_words(1, y.stride, 2), count, dtype=np.uint32), 2)
        op = RMSNorm(dev, Vectors(x, length, 0, length), w_t, Vectors(y, length), eps, count,
                     residual=Vectors(res, length, 0, length) if residual else None, xq=xq,
                     x_out=Vectors(x_out, length) if residual else None, workgroups=workgroups)
        assert [(launch.groups, launch.invocations) for launch in op.launches] == [
            ((workgroups or spread, count, 1), RMS_NORM_GPU_WG)]
        run(backend, [op], outputs=[x, y, x_out, xq.xq])
        assert np.array_equal(x.read().reshape(count, -1)[:, :length], xs[v0:v0 + count])
        return y.read().reshape(count, -1), x_out.read().reshape(count, -1), xq.xq.read().reshape(count, -1)

    y, xo, q = norm(0, n)
    x_want = xs + rs if residual else xs
    if residual:
        assert np.array_equal(xo[:, :length], x_want)
    x64 = x_want.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w
    assert ref.nmse(y[:, :length], want) < NMSE_F32
    y1, xo1, q1 = norm(0, n, workgroups=1)
    assert y1.tobytes() == y.tobytes() and q1.tobytes() == q.tobytes() and (xo1.tobytes() == xo.tobytes()
                                                                            or not residual)
    for v in range(n):
        y1, _, q1 = norm(v, 1)
        assert y1.tobytes() == y[v:v + 1].tobytes() and q1.tobytes() == q[v:v + 1].tobytes()


@pytest.mark.parametrize("preset", ["smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"])
def test_rms_norm_gpu_launch_within_bounds(backend, preset):
    """The RMSNorm of a SmolLM2-, 1B- and 8B-shaped step with NVIDIA's
    launches: at most GPU_DEPTH_BOUND dependent loads per invocation (the sum's
    loop 1-2 iterations, the slice's blocks 1) and a workgroup of 512 per 512
    values (2, 4 and 8: 4,096 invocations for the 8B's 4,096 values, which
    issue 47 reads as 128 workgroups' worth of NVIDIA's 32-wide subgroups);
    the launch before (spread off: one subgroup of 32 per vector, as the
    H200 ran it in 97 us for 4096 values, 2026-11-26) walks the vector 32 at
    a time."""
    from vkq.commands.presets import PRESETS

    width = PRESETS[preset].hidden
    x, w, y = (backend.tensor(width) for _ in range(3))
    for spread, groups, invocations, depth in ((True, -(-width // 512), 512, -(-width // 2048) + 1),
                                               (False, 1, 32, -(-width // 128) + -(-width // 1024))):
        op = RMSNorm(launches_of(backend.device, "nvidia"), Vectors(x, width), w, Vectors(y, width), 1e-5,
                     spread=spread)
        (launch,) = op.launches
        assert (launch.groups, launch.invocations, launch.depth) == ((groups, 1, 1), invocations, depth)
        assert (launch.depth <= GPU_DEPTH_BOUND) == spread or width < 2048
        assert (launch.total >= min(width, 4096)) == spread
    assert rms_norm_depth(4096, 32) == 36 and rms_norm_depth(4096, 512, 8) == 3 and rms_norm_depth(4100, 512, 9) == 4


def test_rms_norm_in_place_is_one_workgroup(backend):
    x = upload(backend, np.ones(64, np.float32))
    with pytest.raises(ValueError, match="1 where x is written back in place"):
        RMSNorm(backend.device, Vectors(x, 64), upload(backend, np.ones(64, np.float32)),
                Vectors(backend.tensor(64), 64), 1e-5, residual=Vectors(x, 64), workgroups=2)
    # NVIDIA's launches would spread a vector of 4096 over 8 workgroups: written back in place, one
    x = backend.tensor(4096)
    op = RMSNorm(launches_of(backend.device, "nvidia"), Vectors(x, 4096), x, Vectors(backend.tensor(4096), 4096),
                 1e-5, residual=Vectors(backend.tensor(4096), 4096))
    assert op.workgroups == 1 and op.launches[0].groups == (1, 1, 1)


# -- RoPE, KV cache, attention ---------------------------------------------------------

SHAPES = [  # n_head, n_head_kv, head_dim, n_rot
    pytest.param(9, 3, 64, 64, id="smollm2-9x3x64"),
    pytest.param(5, 5, 64, 64, id="mha-5x64"),
    pytest.param(7, 1, 37, 20, id="mqa-7x37-rot20"),
    pytest.param(6, 2, 33, 32, id="gqa3-6x33-rot32"),
    pytest.param(20, 2, 32, 32, id="gqa10-20x32"),  # a K/V head's 10 query heads: workgroups of 8 and 2
]


def inv_freq(n_rot, base=10000.0, scale=1.0, factors=None):
    f = base ** (-2.0 * np.arange(n_rot // 2) / n_rot)
    return f / (1.0 if factors is None else factors) / scale


def rope64(x, positions, freqs, n_rot):
    """x (n, heads, hd) float64: adjacent pairs rotate by pos * freqs[i]."""
    out = x.astype(np.float64).copy()
    ang = np.asarray(positions, np.float64)[:, None, None] * freqs[None, None, :]
    x0, x1 = out[..., 0:n_rot:2].copy(), out[..., 1:n_rot:2].copy()
    out[..., 0:n_rot:2] = x0 * np.cos(ang) - x1 * np.sin(ang)
    out[..., 1:n_rot:2] = x0 * np.sin(ang) + x1 * np.cos(ang)
    return out


def attention64(q, keys, values, n_head, n_head_kv, pos0):
    """q (n, H, hd); keys/values (T, Hkv, hd) float64; query v sees keys <= pos0 + v."""
    n, _, hd = q.shape
    out = np.zeros_like(q, dtype=np.float64)
    for v in range(n):
        for h in range(n_head):
            g = h // (n_head // n_head_kv)
            s = keys[: pos0 + v + 1, g] @ q[v, h] / np.sqrt(hd)
            p = np.exp(s - s.max())
            out[v, h] = (p / p.sum()) @ values[: pos0 + v + 1, g]
    return out


def cache_tensors(backend, shape: AttentionShape, keys, values):
    """K/V caches (n_head_kv, capacity, hd) holding keys/values (T, Hkv, hd) at positions 0..T-1."""
    def lay(x):
        c = np.full((shape.n_head_kv, shape.capacity, shape.head_dim), np.nan, np.float32)  # unwritten: NaN
        c[:, : x.shape[0]] = x.transpose(1, 0, 2)
        return c
    return upload(backend, lay(keys)), upload(backend, lay(values))


def attention_case(backend, shape: AttentionShape, old_k, old_v, freqs):
    """Caches holding old_k/old_v (T, Hkv, hd) at positions 0..T-1, NaN after
    (an attention step must not read them), the RoPE table and the scratch."""
    k_c, v_c = cache_tensors(backend, shape, old_k, old_v)
    table = upload(backend, rope_table(freqs, shape.capacity))
    return k_c, v_c, table, zeros(backend, shape.n_head * shape.capacity)


def qkv_parts(t, shape: AttentionShape, stride=0):
    """q, k and v as parts of one tensor, as the stacked Q/K/V mat-vec writes them."""
    qd, kvd = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    return Vectors(t, qd, 0, stride), Vectors(t, kvd, qd, stride), Vectors(t, kvd, qd + kvd, stride)


def step_inputs(r, shape: AttentionShape, n):
    """n steps' new q (n, H, hd), k and v (n, Hkv, hd), and the stacked q|k|v rows (7 values of padding)."""
    qd, kvd = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    qkv = r.standard_normal((n, qd + 2 * kvd + 7)).astype(np.float32)
    return (qkv[:, :qd].reshape(n, shape.n_head, shape.head_dim),
            qkv[:, qd:qd + kvd].reshape(n, shape.n_head_kv, shape.head_dim),
            qkv[:, qd + kvd:qd + 2 * kvd].reshape(n, shape.n_head_kv, shape.head_dim), qkv)


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot", SHAPES)
@pytest.mark.parametrize("n_ctx", [1, 300])
def test_attention_step_over_the_cache(backend, n_head, n_head_kv, head_dim, n_rot, n_ctx, reduction):
    """The query at position n_ctx - 1 over a cache of n_ctx - 1 keys and its own:
    q and the new key rotated, the new key and value appended at that position,
    the older ones and the later (NaN) ones left as they were."""
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=n_ctx + 13)
    freqs = inv_freq(n_rot, base=500.0, scale=2.0)
    r = rng(n_ctx + head_dim)
    p0 = n_ctx - 1
    old_k = r.standard_normal((p0, n_head_kv, head_dim)).astype(np.float32)
    old_v = r.standard_normal((p0, n_head_kv, head_dim)).astype(np.float32)
    q, k, v, qkv = step_inputs(r, shape, 1)
    k_c, v_c, table, scores = attention_case(backend, shape, old_k, old_v, freqs)
    qkv_t = upload(backend, qkv)
    out = zeros(backend, n_head * head_dim)
    op = Attention(backend.device, shape, *qkv_parts(qkv_t, shape), k_c, v_c, table, upload(backend, [p0], np.int32),
                   scores, Vectors(out, n_head * head_dim))
    run(backend, [op], outputs=[qkv_t, k_c, v_c, out])

    q_rot, k_rot = rope64(q, [p0], freqs, n_rot), rope64(k, [p0], freqs, n_rot)
    assert np.array_equal(qkv_t.read(), qkv.reshape(-1)), "q, k and v are only read"
    k_cache = k_c.read().reshape(n_head_kv, shape.capacity, head_dim)
    v_cache = v_c.read().reshape(n_head_kv, shape.capacity, head_dim)
    assert np.array_equal(k_cache[:, :p0], old_k.transpose(1, 0, 2)), "older positions untouched"
    assert np.array_equal(v_cache[:, :p0], old_v.transpose(1, 0, 2))
    assert ref.nmse(k_cache[:, p0:p0 + 1].transpose(1, 0, 2), k_rot) < NMSE_F32
    assert np.array_equal(v_cache[:, p0], v[0])
    assert np.isnan(k_cache[:, p0 + 1:]).all() and np.isnan(v_cache[:, p0 + 1:]).all(), "later positions untouched"
    keys = np.concatenate([old_k, k_rot]).astype(np.float64)
    values = np.concatenate([old_v, v]).astype(np.float64)
    want = attention64(q_rot, keys, values, n_head, n_head_kv, p0)
    got = out.read().reshape(1, n_head, head_dim)
    assert np.isfinite(got).all()
    assert ref.nmse(got, want) < NMSE_F32


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot", SHAPES)
def test_attention_steps_fill_the_cache(backend, n_head, n_head_kv, head_dim, n_rot, reduction):
    """Three steps at positions 5, 6, 7 in one graph, on a cache holding 5: each
    sees the keys the steps before it appended (the graph orders them by the
    caches they read and write)."""
    n, p0 = 3, 5
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=11)
    freqs = inv_freq(n_rot)
    r = rng(head_dim)
    old_k = r.standard_normal((p0, n_head_kv, head_dim)).astype(np.float32)
    old_v = r.standard_normal((p0, n_head_kv, head_dim)).astype(np.float32)
    q, k, v, qkv = step_inputs(r, shape, n)
    k_c, v_c, table, scores = attention_case(backend, shape, old_k, old_v, freqs)
    qd = n_head * head_dim
    outs = [zeros(backend, qd) for _ in range(n)]
    ops = [Attention(backend.device, shape, *qkv_parts(upload(backend, qkv[i]), shape), k_c, v_c, table,
                     upload(backend, [p0 + i], np.int32), scores, Vectors(outs[i], qd)) for i in range(n)]
    run(backend, ops, outputs=outs + [k_c])

    positions = np.arange(p0, p0 + n)
    q_rot, k_rot = rope64(q, positions, freqs, n_rot), rope64(k, positions, freqs, n_rot)
    k_cache = k_c.read().reshape(n_head_kv, shape.capacity, head_dim)
    assert ref.nmse(k_cache[:, p0:p0 + n].transpose(1, 0, 2), k_rot) < NMSE_F32
    assert np.isnan(k_cache[:, p0 + n:]).all()
    keys = np.concatenate([old_k, k_rot]).astype(np.float64)
    values = np.concatenate([old_v, v]).astype(np.float64)
    want = attention64(q_rot, keys, values, n_head, n_head_kv, p0)
    got = np.stack([o.read().reshape(n_head, head_dim) for o in outs])
    assert ref.nmse(got, want) < NMSE_F32


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot", SHAPES)
@pytest.mark.parametrize("split", [0, 7])
def test_attention_heads_per_workgroup_keep_the_bits(backend, n_head, n_head_kv, head_dim, n_rot, split):
    """The query heads of a K/V head in one workgroup, or one per workgroup
    (`heads`, every divisor of the group up to 8): the same bits, a decode
    step and a chunk, whole or split positions; a count that does not divide
    the group is refused."""
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=40)
    group = n_head // n_head_kv
    r = rng(head_dim + split)
    old_k = r.standard_normal((30, n_head_kv, head_dim)).astype(np.float32)
    old_v = r.standard_normal((30, n_head_kv, head_dim)).astype(np.float32)
    _, _, _, qkv = step_inputs(r, shape, 3)
    freqs = inv_freq(n_rot)
    qd = n_head * head_dim
    results = {}
    for heads in [d for d in range(1, min(group, 8) + 1) if group % d == 0]:
        for n in (1, 3):
            k_c, v_c, table, _ = attention_case(backend, shape, old_k, old_v, freqs)
            scores = zeros(backend, attention_scratch_size(backend.device, shape, split, n))
            out = backend.tensor(qd, n)
            t = backend.tensor(qkv.shape[1], n)
            t.write(qkv[:n])
            run(backend, [Attention(backend.device, shape, *qkv_parts(t, shape), k_c, v_c, table,
                                    upload(backend, np.arange(30, 30 + n), np.int32), scores, Vectors(out, qd),
                                    split=split, n=n, heads=heads)], outputs=[out])
            results.setdefault(n, []).append((heads, out.read().tobytes()))
    for n, outs in results.items():
        assert all(b == outs[0][1] for _, b in outs), (n, [h for h, _ in outs])
    bad = next(d for d in range(2, 10) if group % d)
    with pytest.raises(ValueError, match=f"{bad} heads per workgroup; a divisor of the {group} query heads"):
        Attention(backend.device, shape, *qkv_parts(upload(backend, qkv[0]), shape), *attention_case(
            backend, shape, old_k, old_v, freqs)[:3], upload(backend, [30], np.int32),
            zeros(backend, attention_scratch_size(backend.device, shape, 0)), Vectors(zeros(backend, qd), qd),
            heads=bad)


def test_rope_table_matches_the_formula():
    freqs = inv_freq(64, base=100000.0)
    table = rope_table(freqs, 300)
    assert table.shape == (300, 32, 2) and table.dtype == np.float32
    assert table[0, :, 0].tolist() == [1.0] * 32 and not table[0, :, 1].any()
    np.testing.assert_allclose(table[299, 5], [np.cos(299 * freqs[5]), np.sin(299 * freqs[5])], rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_head=9, n_head_kv=2), "9 attention heads do not split into 2 KV groups"),
    (dict(n_rot=63), "must be even"),
    (dict(n_rot=66), "at most head_dim 64"),
    (dict(capacity=(1 << 20) + 1), "at most 1048576"),
])
def test_attention_shape_refuses(kwargs, match):
    args = dict(n_head=9, n_head_kv=3, head_dim=64, n_rot=64, capacity=16) | kwargs
    with pytest.raises(ValueError, match=match):
        AttentionShape(**args)


@pytest.mark.parametrize("change, match", [
    (dict(scores=64), "scores scratch holds 64 values, 80 needed"),
    (dict(k_cache=96), "the K cache holds 96 values; .* needs 320"),
    (dict(table=64), "RoPE table holds 64 values, 160 needed"),
    (dict(q=31), "Attention q: 31 values"),
    (dict(head_dim=264), "head_dim 264; at most 256"),
])
def test_attention_refuses(backend, change, match):
    hd = change.get("head_dim", 8)
    shape = AttentionShape(4, 2, hd, 8, 20)
    sizes = dict(scores=80, k_cache=2 * 20 * hd, table=160) | change
    t = zeros(backend, 10000)
    q = Vectors(t, change.get("q", 4 * hd))
    with pytest.raises(ValueError, match=match):
        Attention(backend.device, shape, q, Vectors(t, 2 * hd), Vectors(t, 2 * hd), zeros(backend, sizes["k_cache"]),
                  zeros(backend, 2 * 20 * hd), zeros(backend, sizes["table"]), zeros(backend, 1, np.int32),
                  zeros(backend, sizes["scores"]), Vectors(t, 4 * hd))


# -- SwiGLU, argmax ----------------------------------------------------------------

@pytest.mark.parametrize("n_ff, pad", [(1001, 3), (1536, 4)], ids=["unaligned", "vec4-aligned"])
def test_swiglu(backend, n_ff, pad):
    """Every vector on whole vec4s (read and written four values at a time) or not."""
    n = 2
    r = rng(3)
    gu = (4 * r.standard_normal((n, 2 * n_ff + pad))).astype(np.float32)  # gate | up | padding
    gu[0, :3] = [-100.0, 100.0, 0.0]  # exp overflow, saturation, zero
    gu_t = upload(backend, gu)
    out = zeros(backend, n * 2048)
    stride = gu.shape[1]
    run(backend, [SwiGLU(backend.device, Vectors(gu_t, n_ff, 0, stride), Vectors(gu_t, n_ff, n_ff, stride),
                         Vectors(out, n_ff, 0, 2048), n)], outputs=[out])
    g, u = gu[:, :n_ff].astype(np.float64), gu[:, n_ff:2 * n_ff].astype(np.float64)
    want = g / (1 + np.exp(-g)) * u
    got = out.read().reshape(n, 2048)
    assert np.isfinite(got).all() and not got[:, n_ff:].any(), "nothing written past the vectors"
    assert ref.nmse(got[:, :n_ff], want) < NMSE_F32
    assert abs(got[0, 0]) < 1e-30 and got[0, 1] == pytest.approx(100.0 * u[0, 1])


@pytest.mark.parametrize("parts", [1, 2, 49, 1000])
def test_argmax(backend, parts):
    """In one pass, or in parts (a GPU's launch: each a range, then the best of
    them), numpy's choice: ties to the first, NaN first, all -inf, the last."""
    n_vocab = 49157
    r = rng(4)
    x = r.standard_normal((5, n_vocab)).astype(np.float32)
    x[1, [7, 40000]] = 50.0  # a tie: the first wins
    x[2, [123, 30000]] = np.nan  # NaN wins, the first of them
    x[2, 5] = np.inf
    x[3] = -np.inf  # all equal: index 0
    x[4, n_vocab - 1] = 9.0  # the last element
    x[0, [40149, 40150, 40159, 40160]] = 60.0  # ties across parts' ranges (1000 parts: 40150; 49: 40160)
    x_t = upload(backend, x)
    out = zeros(backend, 5, np.int32)
    op = Argmax(backend.device, Vectors(x_t, n_vocab, 0, n_vocab), out, 5, parts=parts)
    assert len(op.algorithms) == (1 if parts == 1 else 2)
    run(backend, [op], outputs=[out])
    assert out.read().tolist() == np.argmax(x, axis=1).tolist() == [40149, 7, 123, 0, n_vocab - 1]


@pytest.mark.parametrize("preset", ["smollm2-135m", "llama-3.1-8b"])
def test_argmax_gpu_launch_within_bounds(backend, preset):
    """A SmolLM2- and an 8B-shaped vocabulary's argmax with NVIDIA's launches
    (forced): at least 128 workgroups in its first pass, at most
    GPU_DEPTH_BOUND dependent loads per invocation in each pass, and
    numpy's index (the largest value in the last part, its first occurrence)."""
    from vkq.commands.presets import PRESETS

    n_vocab = PRESETS[preset].vocab
    x = rng(5).standard_normal(n_vocab).astype(np.float32)
    x[n_vocab - 3] = x[n_vocab - 100] = 9.0
    out = zeros(backend, 1, np.int32)
    op = Argmax(launches_of(backend.device, "nvidia"), Vectors(upload(backend, x), n_vocab), out)
    first, pick = op.launches
    assert first.workgroups == op.parts >= 128 and first.depth <= GPU_DEPTH_BOUND and pick.depth <= GPU_DEPTH_BOUND
    assert (first.depth, pick.depth) == (4, -(-op.parts // 64))
    run(backend, [op], outputs=[out])
    assert out.read()[0] == np.argmax(x) == n_vocab - 100


# -- Q8_1 outputs: the int8 path's input written by the op that makes it ------------------

class Quantize:
    """The graph's own quantization of x (what a mat-vec on the int8 path runs), as an op."""

    def __init__(self, backend, x, xq, planes):
        self.op = QuantizeQ8_1(backend.device, x.kp, xq.kp, x.n, x.stride, planes)
        self.reads, self.writes = (x,), (xq,)

    def record(self, seq):
        self.op.record(seq)


def check_q8_1_output(backend, make_op, out, planes):
    """make_op(xq) writes `out` (a whole tensor) and, given a Q8_1Output, its
    Q8_1 blocks: they equal QuantizeQ8_1's of the same out, word for word, and
    the float output is the op's without them, bit for bit."""
    run(backend, [make_op(None)], outputs=[out])
    plain = out.read().copy()
    xq = zeros(backend, q8_1_words(out.n, out.stride, planes), np.uint32)
    xq_ref = zeros(backend, q8_1_words(out.n, out.stride, planes), np.uint32)
    op = make_op(Q8_1Output(xq, planes))
    assert op.quantized == (out, xq, planes) and xq in op.writes
    run(backend, [op, Quantize(backend, out, xq_ref, planes)], outputs=[out, xq, xq_ref])
    assert np.array_equal(out.read(), plain)
    assert xq.read().any() and np.array_equal(xq.read(), xq_ref.read())


@pytest.mark.parametrize("planes", [1, 2])
@pytest.mark.parametrize("length, n", [(45, 1), (576, 1), (333, 3)])
def test_rms_norm_q8_1_output(backend, planes, length, n, reduction):
    r = rng(length + n)
    x = r.standard_normal(n * length) * 3
    res = upload(backend, r.standard_normal(n * length))
    w = upload(backend, 1 + 0.1 * r.standard_normal(length))
    y = backend.tensor(length, n)
    # x += res in place: each op gets its own copy of x
    check_q8_1_output(backend, lambda xq: RMSNorm(backend.device, Vectors(upload(backend, x), length, 0, length), w,
                                                  Vectors(y, length), 1e-5, n,
                                                  residual=Vectors(res, length, 0, length), xq=xq),
                      y, planes)


@pytest.mark.parametrize("planes", [1, 2])
@pytest.mark.parametrize("length, n", [(45, 1), (1536, 1), (1001, 2)])
def test_swiglu_q8_1_output(backend, planes, length, n):
    r = rng(length)
    gu = upload(backend, 4 * r.standard_normal(n * 2 * length))
    out = backend.tensor(length, n)
    check_q8_1_output(backend, lambda xq: SwiGLU(backend.device, Vectors(gu, length, 0, 2 * length),
                                                 Vectors(gu, length, length, 2 * length), Vectors(out, length), n,
                                                 xq=xq),
                      out, planes)


@pytest.mark.parametrize("planes", [1, 2])
@pytest.mark.parametrize("n_head, n_head_kv, head_dim", [(9, 3, 64), (5, 5, 32), (3, 1, 96)])
def test_attention_q8_1_output(backend, planes, n_head, n_head_kv, head_dim, reduction):
    shape = AttentionShape(n_head, n_head_kv, head_dim, head_dim, capacity=40)
    r = rng(head_dim)
    old = r.standard_normal((30, n_head_kv, head_dim)).astype(np.float32)
    k_c, v_c, table, scores = attention_case(backend, shape, old, old[::-1].copy(), inv_freq(head_dim))
    qkv_t = upload(backend, step_inputs(r, shape, 1)[3])
    pos = upload(backend, [30], np.int32)
    out = backend.tensor(n_head * head_dim)
    check_q8_1_output(backend, lambda xq: Attention(backend.device, shape, *qkv_parts(qkv_t, shape), k_c, v_c, table,
                                                    pos, scores, Vectors(out, n_head * head_dim), xq=xq),
                      out, planes)


def test_q8_1_output_refuses(backend):
    dev = backend.device
    gu, out = backend.tensor(200), backend.tensor(64)
    xq = zeros(backend, q8_1_words(1, 64, 1), np.uint32)
    gate, up = Vectors(gu, 64), Vectors(gu, 64, 64)
    with pytest.raises(ValueError, match="whole tensor"):  # its blocks would not be the tensor's
        SwiGLU(dev, gate, up, Vectors(backend.tensor(100), 64), xq=Q8_1Output(xq, 1))
    with pytest.raises(ValueError, match="uint32 with 40 words"):
        SwiGLU(dev, gate, up, Vectors(out, 64), xq=Q8_1Output(xq, 2))
    with pytest.raises(ValueError, match="uint32"):
        SwiGLU(dev, gate, up, Vectors(out, 64), xq=Q8_1Output(backend.tensor(100), 1))
    with pytest.raises(ValueError, match="3 planes"):
        SwiGLU(dev, gate, up, Vectors(out, 64), xq=Q8_1Output(xq, 3))
    shape = AttentionShape(2, 1, 48, 48, capacity=4)
    t = backend.tensor(1000)
    with pytest.raises(ValueError, match="head_dim a multiple of 32"):
        Attention(dev, shape, *qkv_parts(t, shape), backend.tensor(192), backend.tensor(192), backend.tensor(192),
                  upload(backend, [0], np.int32), backend.tensor(8), Vectors(backend.tensor(96), 96),
                  xq=Q8_1Output(zeros(backend, q8_1_words(1, 96, 1), np.uint32), 1))


def test_a_graph_reads_an_ops_q8_1_output(backend):
    """A mat-vec of a tensor whose Q8_1 blocks an op wrote reads them and quantizes
    nothing (same result as quantizing it); one of other activations quantizes."""
    length, rows = 96, 40
    w = backend.upload("Q4_0", (rows, length), ggml_quant.random_weights(rows, length, "Q4_0", seed=5))
    gu = upload(backend, 4 * rng(7).standard_normal(2 * length))

    def step(planes):
        g = backend.graph()
        out = backend.tensor(length)
        xq = None if planes is None else Q8_1Output(zeros(backend, q8_1_words(1, out.stride, planes), np.uint32),
                                                    planes)
        g.add(SwiGLU(backend.device, Vectors(gu, length), Vectors(gu, length, length), Vectors(out, length), xq=xq))
        ys = [g.output(g.matvec(w, out, "mmvq", activations=a)) for a in ("q8_1", "q8_1x2")]
        g.run()
        return g.counts["quantize"], [y.read().copy() for y in ys]

    n0, plain = step(None)
    n1, fused1 = step(1)
    n2, fused2 = step(2)
    assert (n0, n1, n2) == (2, 1, 1)
    for got in (fused1, fused2):
        assert all(np.array_equal(a, b) for a, b in zip(got, plain))


# -- long contexts: positions split over workgroups ----------------------------------------

def long_attention(backend, shape: AttentionShape, p0: int, split=None, device=None):
    """The query at position p0 over random keys 0..p0-1, on `device`'s launches
    (default the backend's): (got, want)."""
    device = device or backend.device
    r = rng(p0)
    hd, hkv = shape.head_dim, shape.n_head_kv
    old_k = r.standard_normal((p0, hkv, hd)).astype(np.float32)
    old_v = r.standard_normal((p0, hkv, hd)).astype(np.float32)
    q, k, v, qkv = step_inputs(r, shape, 1)
    freqs = inv_freq(shape.n_rot)
    k_c, v_c, table, _ = attention_case(backend, shape, old_k, old_v, freqs)
    scores = zeros(backend, attention_scratch_size(device, shape, split))
    qd = shape.n_head * hd
    out = zeros(backend, qd)
    op = Attention(device, shape, *qkv_parts(upload(backend, qkv), shape), k_c, v_c, table,
                   upload(backend, [p0], np.int32), scores, Vectors(out, qd), split=split)
    run(backend, [op], outputs=[out, k_c])
    q_rot, k_rot = rope64(q, [p0], freqs, shape.n_rot), rope64(k, [p0], freqs, shape.n_rot)
    keys = np.concatenate([old_k, k_rot]).astype(np.float64)
    values = np.concatenate([old_v, v]).astype(np.float64)
    k_cache = k_c.read().reshape(hkv, shape.capacity, hd)
    assert ref.nmse(k_cache[:, p0:p0 + 1].transpose(1, 0, 2), k_rot) < NMSE_F32, "the new key is appended"
    return out.read().reshape(1, shape.n_head, hd), attention64(q_rot, keys, values, shape.n_head, hkv, p0)


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, positions", [
    pytest.param(9, 3, 64, 5000, id="smollm2-9x3x64-5000"),
    pytest.param(9, 3, 64, 8000, id="smollm2-9x3x64-8000"),
    pytest.param(4, 2, 128, 3000, id="4x2x128-3000"),
    pytest.param(2, 1, 256, 2500, id="2x1x256-2500"),
])
def test_attention_at_long_positions(backend, n_head, n_head_kv, head_dim, positions, reduction):
    """Past ~4,000 positions (head_dim 64; ~2,000 at 128) one invocation's loops
    passed llvmpipe's 65,535-iteration budget and the result drifted (NMSE 0.64
    at 5000): the positions are split over workgroups and combined."""
    shape = AttentionShape(n_head, n_head_kv, head_dim, head_dim, capacity=positions + 3)
    got, want = long_attention(backend, shape, positions - 1)
    # float32 sums of thousands of terms: measured 1e-12..3e-12 (1.5e-12 unsplit at 3950)
    assert ref.nmse(got, want) < 1e-10


@pytest.mark.parametrize("p0", [0, 6, 7, 8, 100, 299])
@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot", SHAPES)
def test_attention_split_positions(backend, n_head, n_head_kv, head_dim, n_rot, p0, reduction):
    """Forced splits of 7 positions per workgroup: before, at and after a split's
    edge, and many splits (as a GPU would run the same shader)."""
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=300)
    got, want = long_attention(backend, shape, p0, split=7)
    assert ref.nmse(got, want) < NMSE_F32


@pytest.mark.parametrize("p0", [0, 7, 8, 9, 100, 299])
@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot", SHAPES)
def test_attention_gpu_launch_positions(backend, n_head, n_head_kv, head_dim, n_rot, p0):
    """NVIDIA's launches (forced): 300 positions split by 8 (attention_split's
    floor), each split's scores over key lanes, its weighted sum over value
    rows and the combine's over rows of splits (attention_launch; every
    shape here takes lanes and rows above 1): before, at and after a
    split's edge, and the last position."""
    dev = launches_of(backend.device, "nvidia")
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=300)
    launch = attention_launch(dev, shape, attention_split(dev, shape))
    assert attention_split(dev, shape) == 8 and launch.key_lanes > 1 and launch.value_rows > 1
    assert launch.combine_rows > 1
    got, want = long_attention(backend, shape, p0, device=dev)
    assert ref.nmse(got, want) < NMSE_F32


@pytest.mark.parametrize("p0, capacity", [(0, 1), (0, 8), (5, 8), (7, 8)])
@pytest.mark.parametrize("n_head, n_head_kv, head_dim, n_rot", SHAPES)
def test_attention_gpu_launch_of_a_short_context(backend, n_head, n_head_kv, head_dim, n_rot, p0, capacity):
    """NVIDIA's launches (forced) of a context too short to split (at most
    MIN_ATTENTION_SPLIT positions: `vkq generate` sizes it to the prompt and
    the new tokens): one dispatch whose scores take key lanes and whose
    weighted sum value rows where the shape has them (attention_launch),
    against float64 at the first, a middle and the last position."""
    dev = launches_of(backend.device, "nvidia")
    shape = AttentionShape(n_head, n_head_kv, head_dim, n_rot, capacity=capacity)
    launch = attention_launch(dev, shape, attention_split(dev, shape))
    assert attention_split(dev, shape) == 0 and launch.key_lanes > 1
    got, want = long_attention(backend, shape, p0, device=dev)
    assert ref.nmse(got, want) < NMSE_F32


def test_attention_gpu_launch_of_a_short_context_q8_1_output(backend):
    """The unsplit dispatch's Q8_1 output on NVIDIA's launches (value rows
    above 1: row 0 writes out, every invocation then quantizes from it)."""
    dev = launches_of(backend.device, "nvidia")
    shape = AttentionShape(9, 3, 64, 64, capacity=8)
    assert attention_launch(dev, shape, 0).value_rows > 1
    check_attention_q8_1_output(backend, dev, shape, positions=6, split=0, seed=8)


def check_attention_q8_1_output(backend, dev, shape: AttentionShape, positions: int, split: int, seed: int) -> None:
    """check_q8_1_output of an Attention step (X_PLANES 2) at `positions` cached
    positions (random keys, their reverse the values) on dev's launches."""
    r = rng(seed)
    old = r.standard_normal((positions, shape.n_head_kv, shape.head_dim)).astype(np.float32)
    k_c, v_c, table, _ = attention_case(backend, shape, old, old[::-1].copy(), inv_freq(shape.head_dim))
    scores = zeros(backend, attention_scratch_size(dev, shape, split))
    qkv_t = upload(backend, step_inputs(r, shape, 1)[3])
    pos = upload(backend, [positions], np.int32)
    qd = shape.n_head * shape.head_dim
    out = backend.tensor(qd)
    check_q8_1_output(backend, lambda xq: Attention(dev, shape, *qkv_parts(qkv_t, shape), k_c, v_c, table, pos,
                                                    scores, Vectors(out, qd), xq=xq, split=split), out, 2)


@pytest.mark.parametrize("positions", [1, 8, 9, 64, 512, 4096])
@pytest.mark.parametrize("preset", ["smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"])
def test_attention_gpu_launch_within_bounds(backend, preset, positions):
    """A SmolLM2-, 1B- and 8B-shaped decode step's attention (one layer's op,
    as the step records it per layer) with NVIDIA's launches at a full cache
    of 1 to 4,096 positions: each dispatch at most GPU_DEPTH_BOUND
    dependent loads per invocation, and the split dispatch at least 128
    workgroups (2 per SM of an H100's 132 wanted) where the context has
    positions enough for them (at least MIN_ATTENTION_SPLIT a split: 8 and
    64 positions split in 2 and 8; 1 and 8 are one dispatch, a workgroup
    per K/V head's query heads, its loops spread over key lanes and value
    rows). The combine stays one workgroup per query head (9 or 32): it
    reads each head's partial results once (at most 81 splits of head_dim
    + 4 floats here), and its Q8_1 output needs a head's values in one
    workgroup. Spread off, the launch before: a workgroup of 32 per head
    walks every position."""
    from vkq.commands.presets import PRESETS
    from vkq.llama.vector_ops import MIN_ATTENTION_SPLIT, attention_heads

    spec = PRESETS[preset]
    dev = launches_of(backend.device, "nvidia")
    shape = AttentionShape(spec.n_head, spec.n_head_kv, spec.head_dim, spec.head_dim, capacity=positions)
    qd, kvd = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    qkv = backend.tensor(qd + 2 * kvd)
    caches = [backend.tensor(shape.cache_size) for _ in range(2)]
    table, pos = backend.tensor(positions * shape.n_rot), zeros(backend, 1, np.int32)

    def attention(spread):
        split = attention_split(dev, shape, spread)
        scores = backend.tensor(attention_scratch_size(dev, shape, split))
        return Attention(dev, shape, *qkv_parts(qkv, shape), *caches, table, pos, scores,
                         Vectors(backend.tensor(qd), qd), split=split, heads=None if spread else 1, spread=spread)

    op = attention(True)
    assert all(launch.depth <= GPU_DEPTH_BOUND for launch in op.launches), op.launches
    step = op.launches[0]
    if positions <= MIN_ATTENTION_SPLIT:
        assert op.split == 0 and len(op.launches) == 1
    else:
        assert op.split and op.launches[1].groups == (shape.n_head, 1, 1)
    splits = -(-positions // (op.split or positions))
    assert step.workgroups == shape.n_head // attention_heads(shape) * splits
    # (fewer than 128 only where the splits are as short as they go, or there is one)
    assert step.workgroups >= 128 or op.split in (0, MIN_ATTENTION_SPLIT)
    (old,) = attention(False).launches
    assert old.groups == (shape.n_head, 1, 1) and old.invocations == 32 and old.depth > max(positions, 16)


# A step's op over this many values or more should launch at least this many invocations: issue 47's
# "128 workgroups' worth" read as 128 of NVIDIA's 32-wide subgroups (an H100's 132 SMs, a warp or more each).
GPU_WIDE_VALUES = GPU_WIDE_INVOCATIONS = 128 * 32


@pytest.mark.parametrize("preset", ["smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"])
def test_step_vector_ops_gpu_launch_within_bounds(backend, preset):
    """Every vector op of a SmolLM2-, 1B- and 8B-shaped one-token step with
    NVIDIA's launches, built from the preset's shapes without a model file
    (their launches depend on the shapes alone; EmbedRows on the row length
    alone, so its matrix is 2 rows of it): at most GPU_DEPTH_BOUND dependent
    loads per invocation, and over GPU_WIDE_VALUES values or more, at least
    GPU_WIDE_INVOCATIONS invocations, but for the exceptions below, whose
    numbers the test pins. The attention (at 512 and 4,096 positions):
    test_attention_gpu_launch_within_bounds; the mat-vecs and the graph's
    own Q8_1 quantize (vkq.ops.QuantizeQ8_1, where no op writes its input's
    blocks: a block of 32 an invocation, 64 a workgroup, depth 1) are not
    vector ops. HeadNorm and ExpertRouting are not in a llama step:
    test_head_norm_and_expert_routing_gpu_launch.

    Exceptions, each a copy or an elementwise op whose every invocation
    takes one 32-value block (its Q8_1 block, where it writes one, needs
    the block's 32 values in one invocation) in loads that do not depend on
    each other (depth 1: one memory latency, however few invocations):
    - EmbedRows of the 8B's 4,096 values: 128 invocations (2 workgroups of
      64), a 32-value chunk of the quantized row each.
    - SwiGLU of the 1B's 8,192 and the 8B's 14,336 values: 256 and 448
      invocations (4 and 7 workgroups of 64), 8 vec4s of gate and of up
      each; where it runs at all: a gate and up stacked in one buffer take
      it fused into their mat-vec."""
    from vkq.commands.presets import PRESETS

    spec = PRESETS[preset]
    dev = launches_of(backend.device, "nvidia")
    hidden, ff, vocab = spec.hidden, spec.ffn, spec.vocab
    exceptions = {("EmbedRows", 4096): (2, 64), ("SwiGLU", 8192): (4, 64), ("SwiGLU", 14336): (7, 64)}

    emb = backend.upload("Q4_0", (2, hidden), ggml_quant.random_weights(2, hidden, "Q4_0", seed=2))
    x, res, x_out, y = (backend.tensor(hidden) for _ in range(4))
    gate, up, act = (backend.tensor(ff) for _ in range(3))
    ops = {
        "EmbedRows": (hidden, EmbedRows(dev, emb, zeros(backend, 1, np.int32), Vectors(x, hidden))),
        # a layer's norm: the residual added, x + residual to the other x, y's Q8_1 blocks
        "RMSNorm": (hidden, RMSNorm(dev, Vectors(x, hidden), backend.tensor(hidden), Vectors(y, hidden), 1e-5,
                                    residual=Vectors(res, hidden), x_out=Vectors(x_out, hidden),
                                    xq=Q8_1Output(backend.tensor(q8_1_words(1, y.stride, 2), dtype=np.uint32), 2))),
        "SwiGLU": (ff, SwiGLU(dev, Vectors(gate, ff), Vectors(up, ff), Vectors(act, ff),
                              xq=Q8_1Output(backend.tensor(q8_1_words(1, act.stride, 2), dtype=np.uint32), 2))),
        "Argmax": (vocab, Argmax(dev, Vectors(backend.tensor(vocab), vocab), zeros(backend, 1, np.int32))),
    }
    for name, (values, op) in ops.items():
        for launch in op.launches:
            assert launch.depth <= GPU_DEPTH_BOUND, (name, launch)
        widest = max(op.launches, key=lambda launch: launch.total)
        if (name, values) in exceptions:
            assert (widest.workgroups, widest.invocations, widest.depth) == (*exceptions[name, values], 1)
        elif values >= GPU_WIDE_VALUES:
            assert widest.total >= GPU_WIDE_INVOCATIONS, (name, values, widest)
    # (the 8B's norm: 8 workgroups of 512, where one of 512 was too narrow)
    assert (ops["RMSNorm"][1].launches[0].total >= GPU_WIDE_INVOCATIONS) == (hidden >= GPU_WIDE_VALUES)


@pytest.mark.parametrize("preset", ["qwen3-0.6b", "qwen3-30b-a3b"])
def test_head_norm_and_expert_routing_gpu_launch(backend, preset):
    """Qwen3's Q norms (HeadNorm: a workgroup of 32 per head of 128, the
    sum's loop and the scaling's 4 each: 8) and a mixture-of-experts router
    (ExpertRouting over 128 experts: 4 logits per invocation) with NVIDIA's
    launches: within GPU_DEPTH_BOUND. The 0.6B's 2,048 query values are
    under GPU_WIDE_VALUES; the 30B's 4,096 are an exception: 32 workgroups
    of 32, 1,024 invocations, a head's 128-value norm reduced in its own
    subgroup (a second subgroup per head would need a shared-memory step
    for 4 values each). The router's 128 logits are under GPU_WIDE_VALUES."""
    from vkq.commands.presets import PRESETS

    spec = PRESETS[preset]
    dev = launches_of(backend.device, "nvidia")
    qd = spec.n_head * spec.head_dim
    q = backend.tensor(qd)
    norm = HeadNorm(dev, Vectors(q, qd), spec.head_dim, weight=backend.tensor(spec.head_dim), eps=1e-6)
    (launch,) = norm.launches
    assert launch.groups == (spec.n_head, 1, 1) and launch.invocations == 32 and launch.depth == 8
    assert launch.total >= GPU_WIDE_INVOCATIONS or qd < GPU_WIDE_VALUES or (qd, launch.total) == (4096, 1024)
    if spec.n_expert:
        k = spec.n_expert_used
        route = ExpertRouting(dev, Vectors(backend.tensor(spec.n_expert), spec.n_expert),
                              zeros(backend, k, np.int32), zeros(backend, k), k)
        (launch,) = route.launches
        assert launch.depth == spec.n_expert // 32 <= GPU_DEPTH_BOUND and spec.n_expert < GPU_WIDE_VALUES


@pytest.mark.parametrize("n_head, n_head_kv, head_dim, positions, p0", [
    pytest.param(9, 3, 64, 4096, 4095, id="smollm2-4096"),
    pytest.param(32, 8, 64, 4096, 4095, id="1b-4096", marks=pytest.mark.slow),
    pytest.param(32, 8, 128, 4096, 4000, id="8b-4096", marks=pytest.mark.slow),
])
def test_attention_gpu_launch_of_a_long_context(backend, n_head, n_head_kv, head_dim, positions, p0):
    """NVIDIA's launches (forced) at 4,096 positions, the workgroups of 512
    and 1024 a GPU takes there (attention_launch), run on this device."""
    dev = launches_of(backend.device, "nvidia")
    shape = AttentionShape(n_head, n_head_kv, head_dim, head_dim, capacity=positions)
    assert attention_launch(dev, shape, attention_split(dev, shape)).wg >= 512
    got, want = long_attention(backend, shape, p0, device=dev)
    assert ref.nmse(got, want) < 1e-10  # (float32 sums of thousands of terms, as test_attention_at_long_positions)


@pytest.mark.parametrize("launches", [None, "nvidia"])
def test_attention_split_q8_1_output(backend, launches):
    """The combine's Q8_1 output, on this device's launches and on NVIDIA's
    (the combine's rows of splits)."""
    dev = launches_of(backend.device, launches)
    check_attention_q8_1_output(backend, dev, AttentionShape(9, 3, 64, 64, capacity=200), positions=150, split=16,
                                seed=9)
