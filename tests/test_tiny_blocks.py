"""Finite x whose 32-value block is tiny (largest |x| below ~1.5e-36) on the int8 path.

Q8_1's scale d = amax/127 of such a block is a float32 subnormal: 1/d
overflows to inf and 0 * inf is NaN, which made every output NaN. Such a
block is flushed to zero (d = 0, quants 0) by the shaders and the reference
alike, as a GPU that flushes subnormals would do anyway: it changes a result
by at most 32 * 1.5e-36 * |w| per block (ggml, which keeps d in fp16,
flushes every block whose amax is below ~7.6e-6). Checked on every int8
type through Backend.matvec and a graph, and on the ops that store Q8_1
blocks themselves (RMSNorm, SwiGLU, Attention).
"""
from __future__ import annotations

import numpy as np
import pytest

import ggml_quant
import vkq.blocks.reference as ref
from conftest import NMSE_TIGHT
from vkq.blocks.formats import FORMATS
from vkq.llama.vector_ops import Attention, AttentionShape, Q8_1Output, RMSNorm, SwiGLU, Vectors
from vkq.ops import q8_1_words

INT8_TYPES = tuple(t for t, f in FORMATS.items() if f.has_int8_path)
ROWS, K = 19, 256
TINY = 1e-38


def tiny_x(k: int = K) -> np.ndarray:
    """Ones, block 1 zero but for one subnormal-scale value, block 3 all tiny normals."""
    x = np.ones(k, np.float32)
    x[32:64] = 0
    x[40] = TINY
    if k >= 128:
        x[96:128] = np.linspace(-1e-37, 1e-37, 32, dtype=np.float32)
    return x


def test_reference_flushes_tiny_blocks():
    x = tiny_x()
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no 1/d overflow, no 0 * inf
        q, d = ref.quantize_q8_1(x)
        for planes in (1, 2):
            seen = ref.q8_1_values(x, planes)
            assert np.isfinite(seen).all()
            assert not seen[32:64].any() and not seen[96:128].any()
            np.testing.assert_allclose(seen[:32], 1.0, rtol=1e-6)
    assert d[1] == 0 and d[3] == 0 and not q[32:64].any()
    # the smallest block that keeps its scale: d = the smallest normal float32
    x = np.full(32, 127 * np.finfo(np.float32).tiny, np.float32)
    q, d = ref.quantize_q8_1(x)
    assert d[0] == np.finfo(np.float32).tiny and (q == 127).all()


@pytest.mark.parametrize("activations", ["q8_1", "q8_1x2"])
@pytest.mark.parametrize("qtype", INT8_TYPES)
def test_matvec_and_graph(backend, qtype, activations):
    data = ggml_quant.random_weights(ROWS, K, qtype, seed=4)
    w = backend.upload(qtype, (ROWS, K), data)
    w64 = ref.dequantize(qtype, (ROWS, K), data)
    x = tiny_x()
    want = ref.matvec_model(w64, x, "mmvq", ref_planes(activations))
    y = backend.matvec(w, x, "mmvq", activations=activations)
    assert np.isfinite(y).all(), f"{qtype} {activations}: {y[:4]}"
    assert ref.nmse(y, want) < NMSE_TIGHT
    g = backend.graph()
    xt = g.input(backend.tensor(K))
    yt = g.output(g.matvec(w, xt, "mmvq", activations=activations))
    xt.write(x)
    g.run()
    assert np.array_equal(yt.read(), y)


def ref_planes(activations: str) -> int:
    return 2 if activations == "q8_1x2" else 1


def q8_1_decode(words: np.ndarray, n_blocks: int, planes: int) -> np.ndarray:
    """The values a Q8_1 tensor (q8_1.glsl's layout) holds: d*q (+ d_r*q_r)."""
    per = 4 * (2 * planes + 1)
    blocks = words[: n_blocks * per].reshape(n_blocks, per)
    q = blocks[:, : 8 * planes].copy().view(np.int8).reshape(n_blocks, planes, 32).astype(np.float64)
    d = blocks[:, 8 * planes:].view(np.float32).astype(np.float64)
    values = q[:, 0] * d[:, :1]
    if planes == 2:
        values += q[:, 1] * d[:, 3:4]
    return values.reshape(-1)


def check_op_q8_1(backend, op, out, xq, planes):
    g = backend.graph()
    g.add(op)
    g.output(out)
    g.output(xq)
    g.run()
    y = out.read().reshape(-1)
    got = q8_1_decode(xq.read(), out.stride // 32, planes)
    assert np.isfinite(got).all(), "NaN in the Q8_1 blocks"
    want = ref.q8_1_values(y, planes)
    assert ref.nmse(got[: y.size], want) < 1e-14


def assert_equal_but_flushed(got: np.ndarray, want: np.ndarray) -> None:
    """Equal, where a subnormal may have become zero: Vulkan lets a GPU flush
    them (the H100 does) unless the shader asks for shaderDenormPreserveFloat32."""
    subnormal = (want != 0) & (np.abs(want) < np.finfo(np.float32).tiny)
    assert np.all((got == want) | (subnormal & (got == 0))), np.flatnonzero(got != want)


@pytest.mark.parametrize("planes", [1, 2])
def test_ops_store_tiny_blocks(backend, planes):
    dev = backend.device

    def xq_for(out):
        return backend.tensor(q8_1_words(1, out.stride, planes), dtype=np.uint32)

    def upload(values, dtype=np.float32):
        values = np.ascontiguousarray(values, dtype).reshape(-1)
        t = backend.tensor(values.size, dtype=dtype)
        t.write(values)
        return t

    # RMSNorm: a weight vector with the tiny blocks
    n = 128
    x = upload(np.random.default_rng(1).standard_normal(n))
    y = backend.tensor(n)
    xq = xq_for(y)
    check_op_q8_1(backend, RMSNorm(dev, Vectors(x, n), upload(tiny_x(n)), Vectors(y, n), 1e-5,
                                   xq=Q8_1Output(xq, planes)), y, xq, planes)
    # SwiGLU: silu(1) * up, up with the tiny blocks
    gu = upload(np.concatenate([np.ones(n, np.float32), tiny_x(n)]))
    out = backend.tensor(n)
    xq = xq_for(out)
    check_op_q8_1(backend, SwiGLU(dev, Vectors(gu, n), Vectors(gu, n, n), Vectors(out, n), xq=Q8_1Output(xq, planes)),
                  out, xq, planes)
    # Attention: one position, so out = v (one KV head shared by two query heads)
    shape = AttentionShape(2, 1, 64, 64, capacity=4)
    v = tiny_x(64)
    qkv = upload(np.concatenate([np.ones(128 + 64, np.float32), v]))
    out = backend.tensor(128)
    xq = xq_for(out)
    table = upload(np.tile([1.0, 0.0], 4 * 32))
    op = Attention(dev, shape, Vectors(qkv, 128), Vectors(qkv, 64, 128), Vectors(qkv, 64, 192),
                   backend.tensor(256), backend.tensor(256), table, upload([0], np.int32), backend.tensor(8),
                   Vectors(out, 128), xq=Q8_1Output(xq, planes))
    check_op_q8_1(backend, op, out, xq, planes)
    assert_equal_but_flushed(out.read(), np.concatenate([v, v]))
