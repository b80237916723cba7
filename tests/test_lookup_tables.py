"""The lookup tables vkq's decoders read are the gguf package's, packed as documented."""
import gguf.quants as gq
import numpy as np
import pytest

from vkq.blocks.formats import FORMATS
from vkq.blocks.lookup_tables import TABLES, grid_values, table_words

GRIDS = sorted(name for name, (_, packing) in TABLES.items() if packing != "pairs")
PAIRS = sorted(name for name, (_, packing) in TABLES.items() if packing == "pairs")


@pytest.mark.parametrize("name", GRIDS)
def test_grid_words_unpack_to_gguf_grid(name):
    cls, packing = TABLES[name]
    words = table_words(name)
    expect = grid_values(cls)
    if packing == "bytes":
        got = words.astype("<u4").view(np.uint8).reshape(expect.shape).astype(np.int64)
    else:
        shifts = [0, 8, 16, 24, 4, 12, 20, 28]  # Q4_0's order: elements 0..3 low nibbles, 4..7 high
        got = np.stack([(words >> s) & 0xF for s in shifts], axis=1).astype(np.int64) - 1
    np.testing.assert_array_equal(got, expect)
    # And gguf's grid holds the values of its map, not something else.
    assert set(np.unique(expect)) <= set(int(v) for v in cls.grid_map)


@pytest.mark.parametrize("name", PAIRS)
def test_pair_words_are_the_values_of_both_nibbles(name):
    cls, _ = TABLES[name]
    words, tail = table_words(name)[:256], table_words(name)[256:]
    assert not (words & 0xFF00FF00).any()
    values = np.array(cls.kvalues, np.int8)
    np.testing.assert_array_equal(tail.astype("<u4").view(np.int8), values)  # the 16 values, for selects
    low = (words & 0xFF).astype(np.uint8).view(np.int8)
    high = ((words >> 16) & 0xFF).astype(np.uint8).view(np.int8)
    for b in (0, 1, 0x0F, 0x10, 0x7A, 0xA7, 0xF0, 0xFF):
        assert (low[b], high[b]) == (values[b & 15], values[b >> 4]), hex(b)
    np.testing.assert_array_equal(low, np.tile(values, 16))
    np.testing.assert_array_equal(high, np.repeat(values, 16))


def test_ksigns_is_index_with_parity_bit():
    """What the decoders compute instead of storing ggml's sign table
    (iq_grid.glsl ksign_bytes): index i with bit 7 set where i has an odd
    number of ones, so that the number of minus signs is even."""
    table = np.frombuffer(gq.IQ2_XXS.ksigns, np.uint8)
    assert len(table) == 128
    assert [i | ((bin(i).count("1") & 1) << 7) for i in range(128)] == table.tolist()


def test_every_table_has_its_types():
    """Each grid is read by the types gguf reads it for, each value table by
    the types gguf gives those 16 values, and no table by any other type."""
    users = {name: {f.name for f in FORMATS.values() if f.table == name} for name in TABLES}
    grid_types = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")
    # gguf's IQ4_XS dequantizes with IQ4_NL's values.
    values_of = {"IQ4_NL": gq.IQ4_NL.kvalues, "IQ4_XS": gq.IQ4_NL.kvalues, "MXFP4": gq.MXFP4.kvalues,
                 "NVFP4": gq.NVFP4.kvalues}
    value_types = tuple(values_of)
    expect = {}
    for name, (cls, packing) in TABLES.items():
        if packing == "pairs":
            expect[name] = {t for t in value_types if values_of[t] == cls.kvalues}
        else:
            expect[name] = {t for t in grid_types if getattr(gq, t).grid_hex == cls.grid_hex}
    assert users == expect
    assert all(f.table is None for f in FORMATS.values() if f.name not in grid_types + value_types)


def test_value_lookup_is_one_pipeline_where_a_type_ignores_it(backend):
    """Only types that decode 4-bit quants into 16 values read value_lookup;
    for the others "selects" and "table" are the same pipeline, resolved as one."""
    from dataclasses import replace

    import ggml_quant
    from vkq.resolve import resolve

    for qtype, reads in (("Q4_0", False), ("IQ4_NL", True)):
        w = backend.upload(qtype, (8, 256), ggml_quant.random_weights(8, 256, qtype))
        cfg = replace(backend.pipeline(w, 1, "dmmv"), value_lookup="selects")
        assert resolve(backend, w, 1, config=cfg).value_lookup == ("selects" if reads else "table")
