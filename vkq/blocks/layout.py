"""How uploaded GGUF bytes are laid out on the device.

GGUF stores a matrix as rows of blocks, each block its fields back to back
(Q4_0: 2 bytes of scale, 16 of quants; 18 bytes, so only 2-byte aligned).
On the device vkq stores one array per field instead (struct of arrays),
each starting 16-byte aligned: the quants of every block become aligned
uvec4 loads, and the scales of neighbouring blocks share words. The size is
the GGUF size plus at most 16 bytes of padding per field (and for Q3_K, Q4_K,
Q5_K the unpacked 6-bit scales: vkq.blocks.formats). Fields may also be reordered so
that each 32-element sub-block's bits sit together (vkq.blocks.repack).

A type with a lookup table (`BlockFormat.table`: an i-quant grid, or a 4-bit
quant's 16 values) has the table's words at the start of each of its buffers
(word 0 on, before the first field): the decoders read it with the same loads
as the weights (vkq.blocks.lookup_tables).

A matrix larger than one storage-buffer binding can address
(maxStorageBufferRange: 128 MiB on lavapipe, often 4 GiB on GPUs) is split
into row ranges, each its own buffer; an expert stack is split the same way
(rows r0..r1 of every expert go to one buffer).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .formats import CHUNK, BlockFormat
from .lookup_tables import table_words
from .repack import TRANSFORMS

FIELD_ALIGN = 16  # bytes; the widest load is a uvec4


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def table_bytes(fmt: BlockFormat) -> np.ndarray:
    """The bytes a buffer of this type starts with: its lookup table, or none."""
    if fmt.table is None:
        return np.zeros(0, np.uint8)
    return table_words(fmt.table).view(np.uint8)


@dataclass(frozen=True)
class RowRange:
    start: int
    count: int


@dataclass(frozen=True)
class MatrixLayout:
    fmt: BlockFormat
    n_expert: int
    rows: int
    k: int

    @property
    def k_padded(self) -> int:
        """K on the device: plain types are padded to a whole 32-value block."""
        return _align(self.k, CHUNK) if self.fmt.is_plain else self.k

    @property
    def nblocks(self) -> int:
        """Device blocks per row."""
        return self.k_padded // self.fmt.block_elems

    @property
    def gguf_nbytes(self) -> int:
        return self.n_expert * self.rows * self.fmt.row_bytes(self.k)

    def device_nbytes(self, rows: int) -> int:
        """Bytes of the device buffer holding `rows` rows of every expert."""
        nblk = self.n_expert * rows * self.nblocks
        fields = sum(_align(nblk * f.device_size, FIELD_ALIGN) for f in self.fmt.fields)
        return table_bytes(self.fmt).size + fields

    def split_rows(self, max_buffer_bytes: int) -> list[RowRange]:
        """Row ranges whose buffers each fit in one binding."""
        per_row = self.device_nbytes(1) - table_bytes(self.fmt).size
        slack = FIELD_ALIGN * len(self.fmt.fields) + table_bytes(self.fmt).size
        rows_per_buffer = (max_buffer_bytes - slack) // per_row
        if rows_per_buffer < 1:
            raise ValueError(
                f"one row of this {self.fmt.name} matrix ({per_row} bytes for {self.n_expert} expert(s)) "
                f"is larger than the device's maxStorageBufferRange ({max_buffer_bytes} bytes)"
            )
        return [RowRange(s, min(rows_per_buffer, self.rows - s)) for s in range(0, self.rows, rows_per_buffer)]


def pack_rows(layout: MatrixLayout, data: np.ndarray, rows: RowRange) -> tuple[np.ndarray, list[int]]:
    """Repack rows `rows` of every expert into the device layout.

    data: uint8 (n_expert, rows, row_bytes) in GGUF order.
    Returns the buffer as uint32 words and the word offset of each field.
    """
    fmt = layout.fmt
    part = data[:, rows.start:rows.start + rows.count]
    if fmt.is_plain and layout.k_padded != layout.k:
        elem = fmt.block_bytes // fmt.block_elems
        padded = np.zeros(part.shape[:2] + (layout.k_padded * elem,), np.uint8)
        padded[..., : part.shape[2]] = part
        part = padded
    blocks = part.reshape(-1, fmt.block_bytes)
    table = table_bytes(fmt)  # a multiple of FIELD_ALIGN
    pieces, offsets, pos = ([table], [], table.size) if table.size else ([], [], 0)
    for field in fmt.fields:
        arr = blocks[:, field.offset:field.offset + field.size]
        if field.transform:
            arr = TRANSFORMS[field.transform](arr)
        arr = arr.reshape(-1)
        size = _align(arr.size, FIELD_ALIGN)
        offsets.append(pos // 4)
        pieces.append(arr)
        if size != arr.size:
            pieces.append(np.zeros(size - arr.size, np.uint8))
        pos += size
    buf = np.concatenate(pieces) if len(pieces) > 1 else np.ascontiguousarray(pieces[0])
    if buf.size == 0:
        buf = np.zeros(FIELD_ALIGN, np.uint8)
    return buf.view(np.uint32), offsets
