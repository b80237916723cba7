"""numpy references: what a mat-vec should give, independent of the shaders.

- `dequantize(qtype, shape, data)`: the gguf package's own dequantizer (written
  by ggml's authors, not here) to float64; Q1_0 and Q2_0, which gguf 0.19
  cannot dequantize, by ggml's rules written out below (tests/test_block_bits.py
  holds every bit pattern of them to ggml's own `to_float`).
- `quantize_q8_1(x)`: vkq's Q8_1 activation quantizer, as shaders/q8_1.glsl
  computes it (fp32 arithmetic, round half away from zero, tiny blocks flushed).
- `q8_1_values(x, planes)`: the values the int8 path sees in place of x: one
  Q8_1 plane (activations "q8_1"), or that plus the Q8_1 plane of its fp32
  rounding residual ("q8_1x2"); NaN for every value of a block that holds
  NaN or inf (the quantizer marks such a block with a NaN scale).
- `matvec_model(w, x, path, planes)`: what each path computes in exact
  arithmetic: the dequantize path multiplies by x itself, the int8 path by
  q8_1_values(x) (every block type's value is scale*q + offset, so the int8
  path's integer dot products and sums add up to exactly W @ q8_1_values(x)).
"""
from __future__ import annotations

import gguf
import numpy as np

from .formats import CHUNK, get_format


def _d_and_quants(blocks: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """A block of an fp16 d, then `bits`-bit quants, element j at bits bits*j
    of the rest read as one little-endian integer: (d (nb, 1), quants (nb, elements))."""
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    q = (blocks[:, 2:, None] >> shifts) & ((1 << bits) - 1)
    return d, q.reshape(len(blocks), -1)


def _q1_0(blocks: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_q1_0: d where an element's bit is set, -d where not."""
    d, bit = _d_and_quants(blocks, 1)
    return np.where(bit == 1, d, -d)


def _q2_0(blocks: np.ndarray) -> np.ndarray:
    """ggml's dequantize_row_q2_0: (q - 1) * d, q the element's 2 bits."""
    d, q = _d_and_quants(blocks, 2)
    return (q.astype(np.float32) - 1) * d


# Types gguf 0.19 does not dequantize: fp32 values of (nblocks, block bytes) GGUF blocks.
_DEQUANTIZERS = {"Q1_0": _q1_0, "Q2_0": _q2_0}


def dequantize(qtype, shape, data) -> np.ndarray:
    """float64 weights of the given shape from raw GGUF bytes, by gguf.quants
    (or _DEQUANTIZERS)."""
    fmt = get_format(qtype)
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    k = shape[-1]
    rows = int(np.prod(shape[:-1]))
    with np.errstate(invalid="ignore"):  # a NaN or inf scale: NaN values (0 * inf), as in ggml
        if fmt.name in _DEQUANTIZERS:
            values = _DEQUANTIZERS[fmt.name](raw.reshape(-1, fmt.block_bytes))
        else:
            values = gguf.quants.dequantize(raw.reshape(rows, fmt.row_bytes(k)), fmt.ggml_type)
        return values.astype(np.float64).reshape(shape)


def quantize_q8_1(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x float32 (..., K), K a multiple of 32 -> (int8 quants (..., K), fp32 d (..., K/32)).

    A block with a NaN or inf gets d = NaN and quants 0; one whose d would be
    subnormal (amax below 127 * 2^-126) is flushed: d = 0, quants 0."""
    x = np.asarray(x, np.float32)
    blocks = x.reshape(*x.shape[:-1], -1, CHUNK)
    finite = np.isfinite(blocks).all(axis=-1)
    blocks = np.where(finite[..., None], blocks, np.float32(0))
    amax = np.abs(blocks).max(axis=-1)
    with np.errstate(under="ignore"):
        d = (amax / np.float32(127)).astype(np.float32)
    d = np.where(d >= np.finfo(np.float32).tiny, d, np.float32(0))
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    scaled = blocks * inv[..., None]
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))).astype(np.int8)
    return q.reshape(x.shape), np.where(finite, d, np.float32(np.nan)).astype(np.float32)


def _pad_to_blocks(x: np.ndarray) -> np.ndarray:
    k = x.shape[-1]
    kp = -(-k // CHUNK) * CHUNK
    if kp == k:
        return x
    return np.concatenate([x, np.zeros((*x.shape[:-1], kp - k), np.float32)], axis=-1)


def _plane_values(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    blocks = q.reshape(*q.shape[:-1], -1, CHUNK).astype(np.float64) * d[..., None].astype(np.float64)
    return blocks.reshape(q.shape)


def q8_1_values(x: np.ndarray, planes: int = 1) -> np.ndarray:
    """float64 values the int8 path sees in place of x, `planes` int8 planes per block."""
    x = np.asarray(x, np.float32)
    k = x.shape[-1]
    xp = _pad_to_blocks(x)
    q, d = quantize_q8_1(xp)
    values = _plane_values(q, d)
    if planes == 2:
        # The shader's residual: fp32 x - fp32(d*q), each rounded (no fused multiply-add).
        dq = (q.reshape(*q.shape[:-1], -1, CHUNK).astype(np.float32) * d[..., None]).reshape(q.shape)
        with np.errstate(invalid="ignore"):  # a non-finite block stays NaN
            qr, dr = quantize_q8_1((xp - dq).astype(np.float32))
        values = values + _plane_values(qr, dr)
    elif planes != 1:
        raise ValueError(f"planes must be 1 or 2, got {planes}")
    return values[..., :k]


def matvec_model(w: np.ndarray, x: np.ndarray, path: str, planes: int = 1) -> np.ndarray:
    """float64 model of a path: w (rows, K) float64, x (K,) or (K, n) float32."""
    if path == "dmmv":
        return w @ x.astype(np.float64)
    if path == "mmvq":
        return w @ q8_1_values(x.T, planes).T
    raise ValueError(f"unknown path {path!r}")


def nmse(y: np.ndarray, ref: np.ndarray) -> float:
    """Normalized mean squared error, as ggml's test-backend-ops computes it."""
    ref = np.asarray(ref, np.float64)
    err = np.asarray(y, np.float64) - ref
    denom = float((ref * ref).sum())
    return float((err * err).sum()) / denom if denom else float((err * err).sum())
