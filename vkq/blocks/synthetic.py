"""Random but valid GGUF weights, made fast (for benchmarks and presets).

Quant bytes are uniformly random; scale fields get small finite fp16 values
(random bytes there could be NaN or inf), MXFP4 exponents a sane range.
Which field is a scale is read from the format table, not repeated here.
"""
from __future__ import annotations

import numpy as np

from .formats import BlockFormat, GGMLType

FP16_FIELDS = ("d", "dm")  # fields holding fp16 scales (and mins)
FP16_LEADING = ("ds",)  # fields that begin with an fp16 scale (IQ4_XS: d, then its sub-block scales)


def random_weights(fmt: BlockFormat, rows: int, k: int, rng: np.random.Generator | None = None,
                   n_expert: int = 1) -> np.ndarray:
    """uint8 (n_expert * rows, row_bytes) of valid `fmt` blocks."""
    rng = rng or np.random.default_rng(0)
    n_rows = n_expert * rows
    if fmt.is_plain:
        values = rng.standard_normal((n_rows, k), np.float32) * np.float32(0.05)
        if fmt.ggml_type == GGMLType.BF16:  # the high half of each fp32
            return (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        dtype = np.float32 if fmt.ggml_type == GGMLType.F32 else np.float16
        return values.astype(dtype).view(np.uint8)
    nblocks = n_rows * (k // fmt.block_elems)
    blocks = rng.integers(0, 256, (nblocks, fmt.block_bytes), dtype=np.uint8)
    for field in fmt.fields:
        if field.name in FP16_FIELDS:
            halves = rng.uniform(1e-3, 1e-2, (nblocks, field.size // 2)).astype(np.float16)
            blocks[:, field.offset:field.offset + field.size] = halves.view(np.uint8)
        elif field.name in FP16_LEADING:
            blocks[:, field.offset:field.offset + 2] = rng.uniform(1e-3, 1e-2, (nblocks, 1)).astype(np.float16).view(np.uint8)
        elif fmt.ggml_type == GGMLType.IQ1_M and field.name == "scales":  # d in the top nibbles of 4 u16
            d = rng.uniform(1e-3, 1e-2, nblocks).astype(np.float16).view(np.uint16)
            words = blocks[:, field.offset:field.offset + field.size].copy().view(np.uint16) & np.uint16(0x0FFF)
            for j in range(4):
                words[:, j] |= ((d >> np.uint16(4 * j)) & np.uint16(0xF)) << np.uint16(12)
            blocks[:, field.offset:field.offset + field.size] = words.view(np.uint8)
        elif field.name == "e":  # MXFP4 shared exponent: 2^(e-127) around 2^-6..2^-1
            blocks[:, field.offset] = rng.integers(120, 127, nblocks, dtype=np.uint8)
    return blocks.reshape(n_rows, fmt.row_bytes(k))
