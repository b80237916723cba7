"""The lookup tables some block decoders read, derived from the `gguf` package.

The gguf package (written by ggml's authors) holds each i-quant's grid as
hexadecimal text plus a value map (`gguf.quants.IQ2_XXS.grid_hex`,
`.grid_map`), and the 16 values a 4-bit quant of IQ4_NL / IQ4_XS / MXFP4
stands for (`IQ4_NL.kvalues`, `MXFP4.kvalues`; NVFP4's e2m1 values are MXFP4's). This module packs them into
the 32-bit words the decoders read, so no table is typed by hand.

A table is stored at the start of every device buffer of a matrix of its type
(vkq.blocks.layout; `BlockFormat.table` names it), where the decoders read it with
the same loads as the weights. Not in the shader: a constant array indexed at
run time is copied whole at every lookup by SPIR-V compilers, and lavapipe's
compiler takes minutes over a copy in shared memory at some launch parameters.
A 4-bit quant's value is looked up a byte (two quants) at a time, or picked
from the 16 by selects, per device (vkq.dispatch.config.VALUE_LOOKUPS).

Packings (element 0 lowest):
- "bytes" grids, IQ2_XXS / IQ2_XS / IQ2_S: 8 unsigned bytes per entry (grid
  values 8, 25, 43), two words; IQ3_XXS / IQ3_S: 4 bytes per entry, one word.
- "nibbles" grid, IQ1_S / IQ1_M (shared): 8 values g in -1..1 stored as
  nibbles g + 1, one word per entry, in Q4_0's order: byte j holds element j
  in its low nibble and element 4 + j in its high one, so two masks give the
  entry's 8 values as bytes.
- "pairs" tables, for 16 int8 values indexed by nibbles: one word per byte b
  of two nibbles, value(b & 15) in bits 0..7 and value(b >> 4) in bits
  16..23, so one load decodes a byte of Q4_0-layout quants (256 words); then
  the 16 values as 4 words of bytes, which decoders that pick values by
  selects read instead (PipelineConfig.value_lookup).
ggml's sign table (`IQ2_XXS.ksigns`) is not stored: entry i is i with its
parity in bit 7, which the decoders compute (tested against gguf's table).
"""
from __future__ import annotations

import functools

import gguf.quants as gq
import numpy as np

# table name (BlockFormat.table) -> (gguf class, how its entries are packed)
TABLES = {
    "IQ2XXS_GRID": (gq.IQ2_XXS, "bytes"),
    "IQ2XS_GRID": (gq.IQ2_XS, "bytes"),
    "IQ2S_GRID": (gq.IQ2_S, "bytes"),
    "IQ3XXS_GRID": (gq.IQ3_XXS, "bytes"),
    "IQ3S_GRID": (gq.IQ3_S, "bytes"),
    "IQ1S_GRID": (gq.IQ1_S, "nibbles"),
    "IQ4_PAIRS": (gq.IQ4_NL, "pairs"),
    "E2M1_PAIRS": (gq.MXFP4, "pairs"),
}


def grid_values(cls) -> np.ndarray:
    """(entries, elements per entry) int64 grid values, as gguf decodes them."""
    cls.init_grid()
    return np.asarray(cls.grid, np.float64).reshape(cls.grid_shape).astype(np.int64)


def pair_values(cls) -> np.ndarray:
    """(256, 2) int64: the values of the low and the high nibble of each byte."""
    v = np.array(cls.kvalues, np.int64)
    assert v.shape == (16,) and v.min() >= -128 and v.max() < 128
    b = np.arange(256)
    return np.stack([v[b & 15], v[b >> 4]], axis=1)


@functools.lru_cache(maxsize=None)
def table_words(name: str) -> np.ndarray:
    """A table packed as the decoders read it: uint32, entry-major (read-only)."""
    cls, packing = TABLES[name]
    if packing == "pairs":
        p = pair_values(cls).astype(np.uint8).astype(np.uint32)  # two's complement bytes
        values = np.array(cls.kvalues, np.int8).view("<u4").astype(np.uint32)
        words = np.concatenate([p[:, 0] | (p[:, 1] << 16), values])
    elif packing == "bytes":
        g = grid_values(cls)
        assert g.min() >= 0 and g.max() < 256
        words = np.ascontiguousarray(g.astype(np.uint8)).view("<u4").reshape(-1).astype(np.uint32)
    else:
        g = grid_values(cls)
        assert packing == "nibbles" and g.shape[1] == 8 and g.min() >= -1 and g.max() <= 1
        shifts = np.array([0, 8, 16, 24, 4, 12, 20, 28], np.uint64)  # element -> bit
        words = ((g + 1).astype(np.uint64) << shifts).sum(axis=1).astype(np.uint32)
    words.flags.writeable = False
    return words


def has_value_pairs(table: str | None) -> bool:
    """Whether a type with this table (BlockFormat.table) decodes 4-bit quants
    that index 16 values (and so has a choice of PipelineConfig.value_lookup)."""
    return table is not None and TABLES[table][1] == "pairs"
