"""The block format table (vkq.blocks.formats.FORMATS) and the compiled shaders."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import vkq
from vkq.blocks.formats import FORMATS, QUANTIZED, GGMLType, get_format
from vkq.blocks.layout import MatrixLayout, RowRange, pack_rows, table_bytes
from vkq.blocks.lookup_tables import table_words
from vkq.blocks.reference import dequantize
from vkq.blocks.synthetic import random_weights
from vkq.ops import WEIGHTS_PARAMS, weights_push

ROOT = Path(__file__).resolve().parent.parent
from vkq.device.shader_variants import all_variants, needs_coopmat_compiler, spirv_path

import ggml_quant

FORMAT_PARAMS = [pytest.param(f, id=name) for name, f in FORMATS.items()]
PLAIN = ("F32", "F16", "BF16")


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_names_and_type_ids(fmt):
    """ggml's id of the type (gguf's, or ggml.h's where gguf lacks it: ggml_quant checks
    both against libggml-base)."""
    assert fmt.ggml_type == ggml_quant.type_id(fmt.name)
    assert get_format(fmt.name) is fmt
    assert get_format(fmt.name.lower()) is fmt
    assert get_format(fmt.ggml_type) is fmt
    assert get_format(int(fmt.ggml_type)) is fmt


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_sizes_agree_with_ggml(fmt):
    """gguf's sizes (ggml-common.h's where gguf lacks the type), as libggml-base reports them."""
    assert ggml_quant.available()  # it checks every type's sizes against the library
    elems, nbytes = ggml_quant.block_sizes(fmt.name)
    if fmt.name in PLAIN:
        # The table stores F32/F16/BF16 as 32-value blocks; gguf counts single values.
        assert elems == 1
        assert (fmt.block_elems, fmt.block_bytes) == (32, 32 * nbytes)
        assert fmt.row_bytes(100) == 100 * nbytes
    else:
        assert (fmt.block_elems, fmt.block_bytes) == (elems, nbytes)
        assert fmt.row_bytes(3 * elems) == 3 * nbytes
    assert fmt.block_elems % 32 == 0


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_fields_tile_the_block(fmt):
    fields = sorted(fmt.fields, key=lambda f: f.offset)
    assert fields[0].offset == 0
    for a, b in zip(fields, fields[1:]):
        assert a.offset + a.size == b.offset, f"gap or overlap between {a.name} and {b.name}"
    assert fields[-1].offset + fields[-1].size == fmt.block_bytes
    assert sum(f.size for f in fields) == fmt.block_bytes
    assert all(f.size > 0 for f in fields)
    assert len({f.name for f in fields}) == len(fields)


def test_int8_path_is_for_quantized_types_only():
    assert set(QUANTIZED) == set(FORMATS) - set(PLAIN)
    assert not any(FORMATS[t].has_int8_path for t in PLAIN)


def test_the_suite_makes_every_type():
    """ggml_quant can produce test weights for every type vkq supports."""
    assert set(FORMATS) <= set(ggml_quant.TYPES)


@pytest.mark.parametrize("variant", [pytest.param(v, id=v.name) for v in all_variants()])
def test_spirv_is_compiled(variant):
    path = spirv_path(variant)
    if needs_coopmat_compiler(variant) and not path.is_file():
        pytest.skip("built only with glslang 13 (tests/test_coopmat.py checks it is where that is found)")
    assert path.is_file(), f"{path.name} missing: run python tools/compile_shaders.py"
    words = path.read_bytes()
    assert len(words) % 4 == 0 and words[:4] == (0x07230203).to_bytes(4, "little"), f"{path.name} is not SPIR-V"


def test_every_type_has_every_variant():
    names = {v.name for v in all_variants()}
    for t in FORMATS:
        paths = ("dmmv", "mmvq_dot", "mmvq_emul") if t in QUANTIZED else ("dmmv",)
        for mid in ("", "_id"):
            for p in paths:
                for red in ("sg", "sh"):
                    assert f"mul_mat_vec{mid}_{t.lower()}_{p}_{red}" in names


def test_get_format_rejects_unsupported():
    with pytest.raises(ValueError, match="Q8_K"):
        get_format(GGMLType.Q8_K)
    with pytest.raises(ValueError, match="unknown block type 99"):
        get_format(99)
    with pytest.raises(ValueError, match="Q4_9"):
        get_format("Q4_9")


def test_public_exports():
    assert vkq.FORMATS is FORMATS
    assert vkq.MAX_COLS == 8


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_synthetic_weights_are_finite(fmt):
    """vkq bench's random blocks (vkq.blocks.synthetic) decode, by vkq.blocks.reference (gguf's dequantizer), to
    finite, not all-zero values: no NaN or inf scale from random bytes."""
    data = random_weights(fmt, 4, 512, np.random.default_rng(1))
    values = dequantize(fmt.name, (4, 512), data)
    assert np.isfinite(values).all() and np.abs(values).max() > 0


@pytest.mark.parametrize("fmt", FORMAT_PARAMS)
def test_device_buffer_is_as_sized(fmt):
    """pack_rows builds what device_nbytes reserves: an i-quant's grid at
    word 0 (what its decoder reads there), then the fields, each 16-byte aligned."""
    layout = MatrixLayout(fmt, 2, 5, 512)
    data = random_weights(fmt, 5, 512, np.random.default_rng(2), n_expert=2).reshape(2, 5, -1)
    words, offsets = pack_rows(layout, data, RowRange(0, 5))
    assert words.nbytes == layout.device_nbytes(5)
    table = table_bytes(fmt).view(np.uint32)
    assert offsets[0] == table.size and all(o % 4 == 0 for o in offsets)
    if fmt.table is not None:
        np.testing.assert_array_equal(words[:table.size], table_words(fmt.table))


def test_weights_params_are_the_shaders():
    """The host's names of the push constants (vkq.ops.WEIGHTS_PARAMS) are
    common.glsl's Params, in order; a push must name every one."""
    text = (ROOT / "shaders" / "common.glsl").read_text()
    block = re.search(r"uniform Params \{(.*?)\} p;", text, re.S).group(1)
    assert tuple(re.findall(r"uint (\w+);", block)) == WEIGHTS_PARAMS
    buf = SimpleNamespace(rows=RowRange(5, 3), field_offsets=[0, 8])
    strides = dict(x_col_stride=1, x_slot_stride=2, y_col_stride=3, y_slot_stride=4)
    assert weights_push(buf, 7, **strides).tolist() == [3, 7, 0, 8, 0, 0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="Params: got"):
        weights_push(buf, 7, x_col_stride=1)
    with pytest.raises(ValueError, match="Params: got"):
        weights_push(buf, 7, **strides, n_expert=1)
