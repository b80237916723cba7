"""The i-quant lookup tables vkq's decoders read are the gguf package's, packed as documented."""
import gguf.quants as gq
import numpy as np
import pytest

from vkq.formats import FORMATS
from vkq.iq_tables import GRIDS, grid_values, grid_words, iq4_value_words, ksign, render_glsl

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_committed_glsl_is_generated_from_gguf():
    committed = (ROOT / "shaders" / "blocks" / "iq_tables.glsl").read_text()
    assert committed == render_glsl(), "run python tools/gen_iq_tables.py"


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_grid_words_unpack_to_gguf_grid(name):
    cls, packing = GRIDS[name]
    words = grid_words(name)
    expect = grid_values(cls)
    if packing == "bytes":
        got = words.astype("<u4").view(np.uint8).reshape(expect.shape).astype(np.int64)
    else:
        got = np.stack([(words >> (4 * i)) & 0xF for i in range(8)], axis=1).astype(np.int64) - 1
    np.testing.assert_array_equal(got, expect)
    # And gguf's grid holds the values of its map, not something else.
    assert set(np.unique(expect)) <= set(int(v) for v in cls.grid_map)


def test_iq4_values():
    got = iq4_value_words().astype("<u4").view(np.int8)
    np.testing.assert_array_equal(got, np.array(gq.IQ4_NL.kvalues, np.int8))


def test_ksigns_is_index_with_parity_bit():
    table = np.frombuffer(gq.IQ2_XXS.ksigns, np.uint8)
    assert len(table) == 128
    assert [ksign(i) for i in range(128)] == table.tolist()


def test_every_grid_has_its_types():
    """Each grid is read by the types gguf reads it for, and by no other."""
    users = {name: {f.name for f in FORMATS.values() if f.table == name} for name in GRIDS}
    assert users == {name: {t for t in ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")
                            if getattr(gq, t).grid_hex == cls.grid_hex} for name, (cls, _) in GRIDS.items()}
