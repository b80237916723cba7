"""The block formats vkq multiplies by: one table, the single source of truth.

Each GGUF block type is a small record: how many elements a block holds, how
many bytes it takes in a GGUF file, and the *fields* of the block (byte offset
and size inside the GGUF block). The same table is used by

- the runtime, to split uploaded GGUF bytes into one array per field on the
  device (`vkq.blocks.layout`): every field array starts 16-byte aligned, so shaders
  read scales and quants with aligned 32- and 128-bit loads even for blocks
  that are only 2-byte aligned in the file (Q4_0 is 18 bytes, Q6_K 210), and
  a field may be reordered on the way (`vkq.blocks.repack`);
- the shader build (`tools/compile_shaders.py`), which passes each field's
  size to the GLSL as defines;
- the tests, which check the table against `gguf.GGML_QUANT_SIZES`.

The field layouts follow ggml's `ggml-common.h` (the block_* structs).
F32 and F16 are treated as blocks of 32 plain values so that every type runs
through the same 32-element chunk loop; a row of them whose length is not a
multiple of 32 is padded with zeros on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import gguf

GGMLType = gguf.GGMLQuantizationType
# ggml's id of Q2_0 (ggml.h, enum ggml_type), which gguf 0.19's GGMLType lacks;
# every other type's id is gguf's enum member.
GGML_TYPE_Q2_0 = 42

# Every shader works on 32-element chunks of a row ("sub-blocks"); a block
# holds block_elems // CHUNK of them.
CHUNK = 32


@dataclass(frozen=True)
class Field:
    name: str
    offset: int  # byte offset inside the GGUF block
    size: int  # bytes per block in the GGUF file
    # How the field is reordered for the device (vkq.blocks.repack.TRANSFORMS), and
    # its size there; None: copied as it is.
    transform: str | None = None
    device_bytes: int | None = None

    @property
    def device_size(self) -> int:
        return self.device_bytes or self.size


@dataclass(frozen=True)
class BlockFormat:
    name: str
    ggml_type: int  # ggml's type id: a GGMLType member, or GGML_TYPE_Q2_0
    block_elems: int  # elements per GGUF block (QK)
    block_bytes: int  # bytes per GGUF block
    fields: tuple[Field, ...]
    # Whether the int8 dot-product (MMVQ) path exists: the block's values
    # are small integers times per-16/32 scales. F16/F32 are not.
    has_int8_path: bool = True
    # The lookup table (vkq.blocks.lookup_tables.TABLES: an i-quant grid, or the 16
    # values of a 4-bit quant) the decoder reads, stored at the start of each
    # device buffer (vkq.blocks.layout).
    table: str | None = None

    @property
    def is_plain(self) -> bool:
        """F32/F16/BF16: a 'block' is 32 plain values, padded on the device."""
        return self.ggml_type in (GGMLType.F32, GGMLType.F16, GGMLType.BF16)

    @property
    def paths(self) -> tuple[str, ...]:
        """The mat-vec paths this type has: F32/F16 have no int8 path."""
        return ("dmmv", "mmvq") if self.has_int8_path else ("dmmv",)

    def row_bytes(self, k: int) -> int:
        """Bytes of one row of k elements in a GGUF file."""
        if self.is_plain:
            return k * (self.block_bytes // self.block_elems)
        return k // self.block_elems * self.block_bytes


def _f(name: str, offset: int, size: int, transform: str | None = None, device_bytes: int | None = None) -> Field:
    return Field(name, offset, size, transform, device_bytes)


# The table. Field names are what the GLSL block decoders refer to
# (shaders/blocks/<type>.glsl); `d`/`dm` are fp16 scale (and min) pairs.
# Transforms (vkq/blocks/repack.py) put each 32-element sub-block's bits together;
# only Q3_K/Q4_K/Q5_K's packed 6-bit scales grow (12 -> 16 bytes, one byte
# each), and IQ3_S's hss is padded (44 -> 48 bytes, 16-byte loads), which
# keeps every device copy within 4% of the GGUF size.
FORMATS: dict[str, BlockFormat] = {
    f.name: f
    for f in (
        BlockFormat("F32", GGMLType.F32, 32, 128, (_f("v", 0, 128),), has_int8_path=False),
        BlockFormat("F16", GGMLType.F16, 32, 64, (_f("v", 0, 64),), has_int8_path=False),
        BlockFormat("BF16", GGMLType.BF16, 32, 64, (_f("v", 0, 64),), has_int8_path=False),
        BlockFormat("Q4_0", GGMLType.Q4_0, 32, 18, (_f("d", 0, 2), _f("qs", 2, 16))),
        BlockFormat("Q4_1", GGMLType.Q4_1, 32, 20, (_f("dm", 0, 4), _f("qs", 4, 16))),
        BlockFormat("Q5_0", GGMLType.Q5_0, 32, 22, (_f("d", 0, 2), _f("qh", 2, 4, "bits1_lsb"), _f("qs", 6, 16))),
        BlockFormat("Q5_1", GGMLType.Q5_1, 32, 24, (_f("dm", 0, 4), _f("qh", 4, 4, "bits1_lsb"), _f("qs", 8, 16))),
        BlockFormat("Q8_0", GGMLType.Q8_0, 32, 34, (_f("d", 0, 2), _f("qs", 2, 32))),
        BlockFormat(
            "Q2_K", GGMLType.Q2_K, 256, 84,
            (_f("scales", 0, 16), _f("qs", 16, 64, "bits2_k2"), _f("dm", 80, 4)),
        ),
        BlockFormat(
            "Q3_K", GGMLType.Q3_K, 256, 110,
            (_f("hmask", 0, 32, "bits1_k3"), _f("qs", 32, 64, "bits2_k2"), _f("scales", 96, 12, "scales_k3", 16),
             _f("d", 108, 2)),
        ),
        BlockFormat(
            "Q4_K", GGMLType.Q4_K, 256, 144,
            (_f("dm", 0, 4), _f("scales", 4, 12, "scale_min_k4", 16), _f("qs", 16, 128, "nibbles_k4")),
        ),
        BlockFormat(
            "Q5_K", GGMLType.Q5_K, 256, 176,
            (_f("dm", 0, 4), _f("scales", 4, 12, "scale_min_k4", 16), _f("qh", 16, 32, "bits1_k5"),
             _f("qs", 48, 128, "nibbles_k4")),
        ),
        BlockFormat(
            "Q6_K", GGMLType.Q6_K, 256, 210,
            (_f("ql", 0, 128, "nibbles_k6"), _f("qh", 128, 64, "bits2_k6"), _f("scales", 192, 16), _f("d", 208, 2)),
        ),
        BlockFormat("MXFP4", GGMLType.MXFP4, 32, 17, (_f("e", 0, 1), _f("qs", 1, 16)), table="E2M1_PAIRS"),
        BlockFormat("IQ4_NL", GGMLType.IQ4_NL, 32, 18, (_f("d", 0, 2), _f("qs", 2, 16)), table="IQ4_PAIRS"),
        # d, scales_h and scales_l are one field: a superblock's scales in one 8-byte load.
        BlockFormat("IQ4_XS", GGMLType.IQ4_XS, 256, 136, (_f("ds", 0, 8), _f("qs", 8, 128)), table="IQ4_PAIRS"),
        # qh, signs and scales are one field, padded to 48 bytes: a superblock's in three 16-byte loads.
        BlockFormat(
            "IQ3_S", GGMLType.IQ3_S, 256, 110,
            (_f("d", 0, 2), _f("qs", 2, 64), _f("hss", 66, 44, "pad_16", 48)), table="IQ3S_GRID",
        ),
        # sas: per sub-block four sign indices and its scale in one word.
        BlockFormat("IQ3_XXS", GGMLType.IQ3_XXS, 256, 98, (_f("d", 0, 2), _f("qs", 2, 64), _f("sas", 66, 32)), table="IQ3XXS_GRID"),
        BlockFormat(
            "IQ2_S", GGMLType.IQ2_S, 256, 82,
            (_f("d", 0, 2), _f("qs", 2, 32), _f("signs", 34, 32), _f("qh_scales", 66, 16)), table="IQ2S_GRID",
        ),
        BlockFormat("IQ2_XS", GGMLType.IQ2_XS, 256, 74, (_f("d", 0, 2), _f("qs", 2, 64), _f("scales", 66, 8)), table="IQ2XS_GRID"),
        # qs: per sub-block four grid indices, then their signs and its scale.
        BlockFormat("IQ2_XXS", GGMLType.IQ2_XXS, 256, 66, (_f("d", 0, 2), _f("qs", 2, 64)), table="IQ2XXS_GRID"),
        # d is spread over the top nibbles of the four 16-bit scale words.
        BlockFormat("IQ1_M", GGMLType.IQ1_M, 256, 56, (_f("qs", 0, 32), _f("qh", 32, 16), _f("scales", 48, 8)), table="IQ1S_GRID"),
        BlockFormat("IQ1_S", GGMLType.IQ1_S, 256, 50, (_f("d", 0, 2), _f("qs", 2, 32), _f("qh", 34, 16)), table="IQ1S_GRID"),
        # scales: a UE4M3 byte per 16 elements; qs: e2m1 nibbles, per 16 elements 8 bytes (low nibbles
        # first), put in Q4_0's order per 32.
        BlockFormat("NVFP4", GGMLType.NVFP4, 64, 36, (_f("scales", 0, 4), _f("qs", 4, 32, "nibbles_fp4")),
                    table="E2M1_PAIRS"),
        # A sign bit per element (value +-d), 4 bytes per 32 elements.
        BlockFormat("Q1_0", GGMLType.Q1_0, 128, 18, (_f("d", 0, 2), _f("qs", 2, 16, "bits1_lsb"))),
        BlockFormat("Q2_0", GGML_TYPE_Q2_0, 64, 18, (_f("d", 0, 2), _f("qs", 2, 16, "bits2_lsb"))),
        # Ternary: qs holds 5 trits a byte (240 elements), qh 4 a byte (16); kept as they are (the
        # decoder reads them as ggml stores them: 1.6875 bits per weight on the device too).
        BlockFormat("TQ1_0", GGMLType.TQ1_0, 256, 54, (_f("qs", 0, 48), _f("qh", 48, 4), _f("d", 52, 2))),
        # 2-bit quants laid out as Q2_K's.
        BlockFormat("TQ2_0", GGMLType.TQ2_0, 256, 66, (_f("qs", 0, 64, "bits2_k2"), _f("d", 64, 2))),
    )
}

QUANTIZED = tuple(name for name, f in FORMATS.items() if f.has_int8_path)


def get_format(qtype: str | int | GGMLType) -> BlockFormat:
    """Look a block type up by GGML name (any case) or GGMLQuantizationType."""
    if isinstance(qtype, str):
        fmt = FORMATS.get(qtype.upper())
        if fmt is None:
            raise ValueError(
                f"unknown or unsupported block type {qtype!r}; vkq supports {', '.join(FORMATS)}"
            )
        return fmt
    try:
        type_id = int(qtype)
    except (ValueError, TypeError):
        raise ValueError(f"unknown block type {qtype!r}") from None
    for fmt in FORMATS.values():
        if fmt.ggml_type == type_id:
            return fmt
    try:
        name = GGMLType(type_id).name
    except ValueError:
        raise ValueError(f"unknown block type {qtype!r}") from None
    raise ValueError(f"block type {name} is not supported by vkq; it supports {', '.join(FORMATS)}")
