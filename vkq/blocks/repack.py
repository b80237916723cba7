"""Device-order transforms of block fields: the same bits, in shader order.

GGUF interleaves the bits of a k-quant block for the CPU's benefit (Q4_K's
low and high nibbles belong to different 32-element sub-blocks, Q6_K keeps
four sub-blocks' high bits in one byte). A GPU thread, or one SIMD lane of
lavapipe, decodes one 32-element sub-block at a time; every 32-bit word it
loads should then hold bits of that sub-block only. On lavapipe each word
loaded per invocation costs about as much as all the arithmetic on it, so
the transforms below let every type load close to its own size in bits.

Each transform takes a field as uint8 (nblocks, size) and returns uint8
(nblocks, device size). The formats table (vkq/blocks/formats.py) names the
transform of each field; the GLSL decoders (shaders/blocks/) read this
order. In sub-block order, element e = 16*h + 4*w + k (h: half, w: word of
the half, k: byte of the word):

- nibbles: 16 bytes; byte 4w+k = element 4w+k | element 16+4w+k << 4, so
  (uvec4 >> 4h) & 0x0F0F0F0F gives half h, 4 elements per word, in order;
- bits2: 8 bytes, word h; bits 2w..2w+1 of byte k are element 16h+4w+k, so
  (word_h >> 2w) & 0x03030303 gives word w of half h;
- bits1: 4 bytes, one word; bit 4h+w of byte k is element 16h+4w+k, so
  (word >> (4h+w)) & 0x01010101 gives word w of half h.
"""
from __future__ import annotations

import numpy as np

SUB = 32  # elements per sub-block


# -- packers: element-order values (..., 32) per sub-block ---------------------

def pack_nibbles(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.uint8)
    return v[..., :16] | (v[..., 16:] << 4)


def pack_bits2(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.uint8).reshape(*v.shape[:-1], 2, 4, 4)  # h, w, k
    out = v[..., 0, :] | (v[..., 1, :] << 2) | (v[..., 2, :] << 4) | (v[..., 3, :] << 6)
    return out.reshape(*v.shape[:-3], 8)


def pack_bits1(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.uint8).reshape(*v.shape[:-1], 8, 4)  # (4h+w), k
    shifts = np.arange(8, dtype=np.uint8)[:, None]
    return np.bitwise_or.reduce(v << shifts, axis=-2)


def _per_sub_block(values: np.ndarray, packer) -> np.ndarray:
    """(nblocks, n_elems) element-order values -> packed bytes (nblocks, ...)."""
    nb = values.shape[0]
    return packer(values.reshape(nb, -1, SUB)).reshape(nb, -1)


# -- GGUF bit layouts to element order (ggml's ggml-common.h, dequantize_row_* in ggml-quants.c) ---

def _q4k_low(qs: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K qs[128]: chunk c of 64 elements = low nibbles, then high, of qs[32c..]."""
    q = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([q & 0xF, q >> 4], axis=2).reshape(-1, 256)


def _q5k_high(qh: np.ndarray) -> np.ndarray:
    """Q5_K qh[32]: bit s of qh[l] is the fifth bit of element 32s + l."""
    s = np.arange(8, dtype=np.uint8)[None, :, None]
    return ((qh[:, None, :] >> s) & 1).reshape(-1, 256)


def _q6k_low(ql: np.ndarray) -> np.ndarray:
    """Q6_K ql[128]: half h' of 128 elements uses ql[64h'..]; element 32t + l
    is nibble t//2 of ql[64h' + 32(t%2) + l]."""
    q = ql.reshape(-1, 2, 2, 32)  # h', t%2, l
    return np.stack([q & 0xF, q >> 4], axis=2).reshape(-1, 256)  # h', t//2, t%2, l


def _q6k_high(qh: np.ndarray) -> np.ndarray:
    """Q6_K qh[64]: bits 2t of qh[32h' + l] are the high 2 bits of element 128h' + 32t + l."""
    q = qh.reshape(-1, 2, 1, 32)
    t = np.arange(4, dtype=np.uint8)[None, None, :, None]
    return ((q >> (2 * t)) & 3).reshape(-1, 256)


def _q2k_low(qs: np.ndarray) -> np.ndarray:
    """Q2_K/Q3_K/TQ2_0 qs[64]: bits 2j of qs[32h' + l] are element 128h' + 32j + l."""
    q = qs.reshape(-1, 2, 1, 32)
    j = np.arange(4, dtype=np.uint8)[None, None, :, None]
    return ((q >> (2 * j)) & 3).reshape(-1, 256)


def _q3k_high(hmask: np.ndarray) -> np.ndarray:
    """Q3_K hmask[32]: bit s of hmask[l] is the high bit of element 32s + l."""
    return _q5k_high(hmask)


def _lsb_first(field: np.ndarray, bits: int) -> np.ndarray:
    """Fields of `bits` bits, element j at bits bits*j.. of the field read as
    one little-endian integer (Q5_0/Q5_1's fifth bits, Q1_0's sign bits,
    Q2_0's 2-bit quants)."""
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return ((field[:, :, None] >> shifts) & ((1 << bits) - 1)).reshape(len(field), -1)


def _fp4_nibbles(qs: np.ndarray) -> np.ndarray:
    """NVFP4 qs[32]: per 16 elements 8 bytes, element j the low nibble of
    byte j and element 8 + j its high nibble."""
    q = qs.reshape(len(qs), -1, 1, 8)
    return np.concatenate([q & 0xF, q >> 4], axis=2).reshape(len(qs), -1)


def _k4_scale_min(scales: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K scales[12] (ggml's get_scale_min_k4) -> 8 (scale, min) byte pairs."""
    s = scales.astype(np.uint8)
    sc = np.empty((s.shape[0], 8), np.uint8)
    m = np.empty_like(sc)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return np.stack([sc, m], axis=2).reshape(-1, 16)


def _q3k_scales(scales: np.ndarray) -> np.ndarray:
    """Q3_K scales[12]: 16 six-bit scales -> 16 int8 (scale - 32)."""
    s = scales.astype(np.uint8)
    lo = np.concatenate([s[:, 0:8] & 0xF, s[:, 0:8] >> 4], axis=1)  # scale i < 8: low nibble of byte i
    hi = (s[:, 8:12, None] >> (2 * np.arange(4, dtype=np.uint8))[None, None, :]) & 3  # byte 8 + i%4, bits 2(i//4)
    hi = hi.transpose(0, 2, 1).reshape(-1, 16)
    return ((lo | (hi << 4)).astype(np.int16) - 32).astype(np.int8).view(np.uint8)


def _pad_16(field: np.ndarray) -> np.ndarray:
    """Zero bytes after the field up to a multiple of 16, so that every
    block's copy starts 16-byte aligned (read with 16-byte loads)."""
    return np.pad(field, ((0, 0), (0, -field.shape[1] % 16)))


TRANSFORMS = {
    "nibbles_k4": lambda f: _per_sub_block(_q4k_low(f), pack_nibbles),
    "bits1_k5": lambda f: _per_sub_block(_q5k_high(f), pack_bits1),
    "nibbles_k6": lambda f: _per_sub_block(_q6k_low(f), pack_nibbles),
    "bits2_k6": lambda f: _per_sub_block(_q6k_high(f), pack_bits2),
    "bits2_k2": lambda f: _per_sub_block(_q2k_low(f), pack_bits2),
    "bits1_k3": lambda f: _per_sub_block(_q3k_high(f), pack_bits1),
    "bits1_lsb": lambda f: _per_sub_block(_lsb_first(f, 1), pack_bits1),
    "bits2_lsb": lambda f: _per_sub_block(_lsb_first(f, 2), pack_bits2),
    "nibbles_fp4": lambda f: _per_sub_block(_fp4_nibbles(f), pack_nibbles),
    "scale_min_k4": _k4_scale_min,
    "scales_k3": _q3k_scales,
    "pad_16": _pad_16,
}
