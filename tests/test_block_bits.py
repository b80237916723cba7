"""Random bytes as blocks of the newest types (NVFP4, Q1_0, Q2_0, TQ1_0,
TQ2_0): every bit pattern decodes as ggml's own dequantizer (its type
traits' to_float, tests/ggml_quant.py) decodes it.

ggml's quantizer never writes some codes (Q2_0's and TQ2_0's fourth 2-bit
code, TQ1_0 bytes above 242, NVFP4 scale bytes with bit 7 set), so weights
from it do not test them. Here every byte of a block takes every value: in
each of two rounds of 256 blocks, byte j runs through a permutation of
0..255. Then blocks with special fp16 scales: zeros, subnormals, the largest
finite, infinities and NaNs (NVFP4's UE4M3 scale bytes are all finite in
ggml's decoding, and all 256 are in the rounds).

- vkq.blocks.reference.dequantize, the reference of `vkq compare` and of the
  other tests, equals ggml's to_float bit for bit;
- the shaders' block decoders, read through the embedding-row op (EmbedRows:
  each value as scale * quant + offset), give ggml's float32 values: the
  same bits, NaN where it has NaN, an inf where it has that inf;
- the mat-vec on both paths, with the per-chunk and the whole-unit readers
  of the decoders, is within NMSE_TIGHT of the float64 model of the path on
  these weights (their non-finite scales replaced by finite ones);
- a row holding a NaN scale gives NaN, one holding an inf scale +-inf or
  NaN: never a finite number (float64 numpy gives NaN for most of them: it
  adds the block's +inf and -inf weights times x, where the mat-vec scales
  the block's integer sum, as ggml does); the other rows are unaffected.
"""
from __future__ import annotations

import numpy as np
import pytest

import ggml_quant
import vkq.blocks.reference as ref
from conftest import NMSE_TIGHT, random_x, references
from vkq.blocks.formats import FORMATS
from vkq.dispatch.config import PipelineConfig
from vkq.llama.vector_ops import EmbedRows, Vectors

NEW_TYPES = ("NVFP4", "Q1_0", "Q2_0", "TQ1_0", "TQ2_0")
FP16_SCALE_TYPES = tuple(t for t in NEW_TYPES if any(f.name == "d" for f in FORMATS[t].fields))
# fp16 bits: +-0, the smallest and largest subnormals, the smallest normal, +-65504, +-inf, NaNs.
SPECIAL_D = (0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0xFE01)


def every_byte_blocks(qtype: str, rounds: int = 2, seed: int = 0) -> np.ndarray:
    """uint8 (rounds * 256 + len(SPECIAL_D), block bytes): every byte of the
    block takes every value in each round; then a block per special scale."""
    fmt = FORMATS[qtype]
    rng = np.random.default_rng(seed)
    blocks = np.concatenate([np.stack([rng.permutation(256) for _ in range(fmt.block_bytes)], axis=1)
                             for _ in range(rounds)]).astype(np.uint8)
    specials = rng.integers(0, 256, (len(SPECIAL_D), fmt.block_bytes), dtype=np.uint8)
    if qtype in FP16_SCALE_TYPES:
        d = next(f for f in fmt.fields if f.name == "d")
        specials[:, d.offset:d.offset + 2] = np.array(SPECIAL_D, np.uint16).view(np.uint8).reshape(-1, 2)
    return np.concatenate([blocks, specials])


def d_field(qtype: str, blocks: np.ndarray) -> np.ndarray:
    """A view of the blocks' fp16 scales, as uint16."""
    d = next(f for f in FORMATS[qtype].fields if f.name == "d")
    return blocks[:, d.offset:d.offset + 2].view(np.uint16)[:, 0]


@pytest.mark.parametrize("qtype", NEW_TYPES)
def test_reference_is_ggml(qtype):
    blocks = every_byte_blocks(qtype)
    want = ggml_quant.to_float(blocks, qtype)
    got = ref.dequantize(qtype, (len(blocks), FORMATS[qtype].block_elems), blocks).reshape(-1)
    assert np.array_equal(got, want.astype(np.float64), equal_nan=True)


@pytest.mark.parametrize("qtype", NEW_TYPES)
def test_shader_decodes_as_ggml(backend, qtype):
    """One block a row, every row decoded on the device by EmbedRows."""
    blocks = every_byte_blocks(qtype)
    rows, k = len(blocks), FORMATS[qtype].block_elems
    want = ggml_quant.to_float(blocks, qtype).reshape(rows, k)
    w = backend.upload(qtype, (rows, k), blocks)
    ids = backend.tensor(rows, dtype=np.int32)
    ids.write(np.arange(rows, dtype=np.int32))
    out = backend.tensor(rows * k)
    g = backend.graph()
    g.add(EmbedRows(backend.device, w, ids, Vectors(out, k, 0, k), rows))
    g.output(out)
    g.run()
    got = out.read().reshape(rows, k)
    # Vulkan lets a GPU flush a subnormal fp16 scale to zero (lavapipe does not).
    flushed = (got == 0) & (np.abs(want) < 2.0 ** -13)
    same = (got == want) | (np.isnan(got) & np.isnan(want)) | flushed
    bad = np.argwhere(~same)
    assert not bad.size, f"{qtype}: {len(bad)} values differ, first at block {bad[0][0]} element {bad[0][1]}: " \
                         f"{got[tuple(bad[0])]} != ggml's {want[tuple(bad[0])]} (bytes {blocks[bad[0][0]].tobytes().hex()})"


# Per-chunk readers (block_quants, K split over threads) and whole units (unit_meta, rows per thread).
CONFIGS = {"chunks": dict(chunks_per_thread=1, split_k=True), "units": dict(chunks_per_thread=8, split_k=False)}
K = 1024


def config(path: str, readers: str) -> PipelineConfig:
    return PipelineConfig(path, path == "mmvq", True, wg_size=8, rows_per_wg=4, source="test", **CONFIGS[readers])


@pytest.mark.parametrize("readers", CONFIGS)
@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("qtype", NEW_TYPES)
def test_matvec_on_every_byte(backend, qtype, path, readers):
    blocks = every_byte_blocks(qtype, seed=1)[:512]  # the rounds
    if qtype in FP16_SCALE_TYPES:  # finite scales only: a random finite fp16 for each NaN or inf
        d = d_field(qtype, blocks)
        bad = (d & 0x7C00) == 0x7C00
        d[bad] = np.random.default_rng(2).integers(0, 0x7C00, bad.sum()) | (d[bad] & 0x8000)
    rows = len(blocks) * FORMATS[qtype].block_elems // K
    w64 = ggml_quant.to_float(blocks, qtype).astype(np.float64).reshape(rows, K)
    assert np.isfinite(w64).all()
    w = backend.upload(qtype, (rows, K), blocks)
    x = random_x(K, 3, seed=4)
    y = backend.matvec(w, x, config=config(path, readers))
    e = max(ref.nmse(y[:, j], ref.matvec_model(w64, x, path)[:, j]) for j in range(3))
    assert e < NMSE_TIGHT, f"{qtype} {path} {readers}: NMSE {e:.3g}"


@pytest.mark.parametrize("readers", CONFIGS)
@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
@pytest.mark.parametrize("qtype", FP16_SCALE_TYPES)
def test_nonfinite_scales(backend, qtype, path, readers):
    rows = 12
    data = ggml_quant.random_weights(rows, K, qtype, seed=5)
    blocks = data.reshape(-1, FORMATS[qtype].block_bytes)  # a view: the scales are set in data
    per_row = len(blocks) // rows
    nan_rows, inf_rows = {2: 0x7E00, 9: 0xFE01}, {5: 0x7C00, 6: 0xFC00}  # row: NaN, -NaN; +inf, -inf
    poisoned = nan_rows | inf_rows
    d = d_field(qtype, blocks)
    for row, bits in poisoned.items():
        d[row * per_row + per_row // 2] = bits
    w64 = ggml_quant.to_float(data, qtype).astype(np.float64).reshape(rows, K)
    x = random_x(K, 2, seed=6)
    with np.errstate(invalid="ignore"):
        exact = w64 @ x.astype(np.float64)
    y = backend.matvec(backend.upload(qtype, (rows, K), data), x, config=config(path, readers))
    clean = [r for r in range(rows) if r not in poisoned]
    assert not np.isfinite(exact[list(poisoned)]).any()
    assert np.isnan(y[list(nan_rows)]).all(), y[list(nan_rows)]
    assert not np.isfinite(y[list(inf_rows)]).any(), y[list(inf_rows)]
    refs = references(w64[clean], x)
    assert ref.nmse(y[clean], refs[path]) < NMSE_TIGHT
