"""vkq's GGUF parse (vkq.gguf_io) against the gguf package's reader: the
same metadata values and the same tensors, byte for byte, for a real model
file, for every metadata value type both byte orders, and for every tensor
type vkq reads."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from vkq.gguf_io import open_gguf

from conftest import finish_gguf, smollm2_path
from ggml_quant import random_weights


def reference(path) -> tuple[dict, dict]:
    """The gguf package's view: metadata contents by key, tensors by name."""
    r = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: (t.tensor_type.name, tuple(int(d) for d in reversed(t.shape.tolist())), t.data)
               for t in r.tensors}
    return meta, tensors


def assert_same_as_reference(path) -> None:
    f = open_gguf(path)
    meta, tensors = reference(path)
    assert f.metadata == meta
    assert [type(v) for v in f.metadata.values()] == [type(v) for v in meta.values()]
    assert list(f.tensors) == list(tensors)
    for name, t in f.tensors.items():
        qtype, shape, data = tensors[name]
        assert (t.qtype, t.shape) == (qtype, shape), name
        assert t.data.dtype == data.dtype and t.data.shape == data.shape, name
        assert np.array_equal(np.asarray(t.data).view(np.uint8), np.asarray(data).view(np.uint8)), name


def test_real_model_file():
    """SmolLM2 as llama.cpp wrote it: 49152 tokens and their merges, 272 tensors."""
    assert_same_as_reference(smollm2_path())


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG], ids=["little", "big"])
def test_every_value_type(tmp_path, endianess):
    path = tmp_path / "values.gguf"
    w = gguf.GGUFWriter(path, "llama", endianess=endianess)
    w.add_uint8("u8", 200)
    w.add_int8("i8", -100)
    w.add_uint16("u16", 60000)
    w.add_int16("i16", -30000)
    w.add_uint32("u32", 4_000_000_000)
    w.add_int32("i32", -2_000_000_000)
    w.add_float32("f32", 1e-5)
    w.add_uint64("u64", 2**63 + 5)
    w.add_int64("i64", -(2**62))
    w.add_float64("f64", 0.1)
    w.add_bool("yes", True)
    w.add_bool("no", False)
    w.add_string("text", "héllo ✓")
    w.add_string("empty", "")
    w.add_array("strings", ["a", "", "Ġthe", "日本"])
    w.add_array("ints", [1, -2, 3])
    w.add_array("floats", [0.5, -1.25])
    w.add_array("bools", [True, False, True])
    w.add_array("none", [])
    w.add_tensor("v", np.arange(7, dtype=np.float32))
    finish_gguf(w, path)
    assert_same_as_reference(path)


def test_every_tensor_type(tmp_path):
    """Block types, float and integer tensors, vectors and 3-d expert stacks,
    with a non-default alignment."""
    path = tmp_path / "tensors.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    rng = np.random.default_rng(0)
    for qtype in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4"):
        w.add_tensor(f"{qtype}.weight", random_weights(3, 256, qtype, seed=1),
                     raw_dtype=gguf.GGMLQuantizationType[qtype])
    w.add_tensor("f16", rng.standard_normal((5, 32)).astype(np.float16))
    w.add_tensor("f32", rng.standard_normal(33).astype(np.float32))
    w.add_tensor("i32", np.arange(6, dtype=np.int32))
    w.add_tensor("experts", random_weights(2 * 4, 64, "Q8_0", seed=2).reshape(2, 4, -1),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    finish_gguf(w, path)
    assert_same_as_reference(path)
    assert open_gguf(path).data_offset % 64 == 0



@pytest.mark.parametrize("kind", ["metadata key", "tensor"])
def test_duplicate_name_refused(tmp_path, kind):
    """As the gguf package's reader refuses them, with the name said."""
    path = tmp_path / "dup.gguf"
    w = gguf.GGUFWriter(path, "llama")
    if kind == "metadata key":
        w.add_uint32("key_a", 1)
        w.add_uint32("key_b", 2)
    else:
        w.add_tensor("blk.a", np.ones(4, np.float32))
        w.add_tensor("blk.b", np.ones(4, np.float32))
    finish_gguf(w, path)
    data = path.read_bytes()
    second = b"key_b" if kind == "metadata key" else b"blk.b"
    path.write_bytes(data.replace(second, second[:-1] + b"a"))  # same length: nothing else moves
    with pytest.raises(ValueError, match=f"{kind} '{second[:-1].decode()}a' appears twice"):
        open_gguf(path)
