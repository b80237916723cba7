"""vkq's GGUF parse (vkq.blocks.gguf_io) against the gguf package's reader: the
same metadata values and the same tensors, byte for byte (in native byte
order), for a real model file, for every metadata value type both byte
orders, and for every tensor type vkq reads. Then what the parse refuses
and what it leaves out, each said as what it is."""
from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from vkq.blocks.gguf_io import load_gguf, open_gguf

from conftest import finish_gguf, smollm2_or_skip
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
        native = np.asarray(data).astype(data.dtype.newbyteorder("="))  # vkq's data is in native byte order
        assert t.data.dtype == native.dtype and t.data.shape == data.shape, name
        assert np.array_equal(np.asarray(t.data).view(np.uint8), native.view(np.uint8)), name


def test_real_model_file():
    """SmolLM2 as llama.cpp wrote it: 49152 tokens and their merges, 272 tensors."""
    assert_same_as_reference(smollm2_or_skip())


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
    for qtype in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4",
                  "NVFP4", "Q1_0", "TQ1_0", "TQ2_0"):
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



def test_a_type_gguf_lacks(tmp_path):
    """Q2_0 (ggml id 42, which gguf 0.19 does not know) is read with the block
    size vkq's format table gives it: written as Q4_0 rows of half the
    elements (18 bytes a block either way), its id and row length patched in."""
    rows, k = 3, 256
    data = random_weights(rows, k, "Q2_0", seed=3)
    path = tmp_path / "q2_0.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("blk.0.ffn_down.weight", data, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    finish_gguf(w, path)
    raw = bytearray(path.read_bytes())
    t = gguf.GGUFReader(path).tensors[0]
    dims_at = t.field.offset + 8 + len(t.name.encode()) + 4  # after the name and the dimension count
    assert struct.unpack_from("<QQI", raw, dims_at) == (k // 2, rows, int(gguf.GGMLQuantizationType.Q4_0))
    struct.pack_into("<QQI", raw, dims_at, k, rows, 42)
    path.write_bytes(bytes(raw))
    t = load_gguf(path)["blk.0.ffn_down.weight"]
    assert (t.qtype, t.shape) == ("Q2_0", (rows, k)) and np.array_equal(t.data, data)


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


# -- what the parse refuses, and why ------------------------------------------

def _info_offsets(path, name: str) -> tuple[int, int]:
    """File offsets of a tensor's first dimension and of its type id."""
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    dims = t.field.offset + 8 + len(name.encode()) + 4  # name length and bytes, dimension count
    return dims, dims + 8 * len(t.shape)


def _two_matrices(path) -> bytes:
    """A file with a Q4_0 (4 x 64) and a Q8_0 (4 x 64) matrix; its bytes."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("a.weight", random_weights(4, 64, "Q4_0", seed=1), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.add_tensor("b.weight", random_weights(4, 64, "Q8_0", seed=2), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    finish_gguf(w, path)
    return path.read_bytes()


def test_type_id_the_gguf_package_does_not_know(tmp_path):
    """Left out by load_gguf like any type vkq does not support (its size is
    unknown, so nothing of it is read), not a corrupt file."""
    path = tmp_path / "new_type.gguf"
    data = _two_matrices(path)
    _, type_at = _info_offsets(path, "a.weight")
    path.write_bytes(data[:type_at] + (99).to_bytes(4, "little") + data[type_at + 4:])
    f = open_gguf(path)
    assert f.tensors["a.weight"].qtype == "GGML type 99" and f.tensors["a.weight"].shape == (4, 64)
    assert f.tensors["a.weight"].data.size == 0
    assert list(load_gguf(path)) == ["b.weight"]


@pytest.mark.parametrize("ne0, ne1", [(40, 1), (48, 4)], ids=["40-elements", "rows-of-48"])
def test_row_not_whole_blocks(tmp_path, ne0, ne1):
    """Q4_0 rows of 48 elements (6 whole blocks in all, inside the file) or 40:
    said as such, not as a tensor past the end of the file."""
    path = tmp_path / "rows.gguf"
    data = _two_matrices(path)
    dims_at, _ = _info_offsets(path, "a.weight")
    dims = ne0.to_bytes(8, "little") + ne1.to_bytes(8, "little")
    path.write_bytes(data[:dims_at] + dims + data[dims_at + 16:])
    with pytest.raises(ValueError, match=rf"'a.weight' \(Q4_0\) has rows of {ne0} elements, not a whole number "
                                         r"of Q4_0 blocks \(32 elements\)$"):
        open_gguf(path)


def test_big_endian_plain_tensors(tmp_path, backend):
    """F32, F16 and integer tensors of a big-endian file come back in native
    byte order, with the same values, and BF16 as a little-endian file's
    bytes; a matrix of them multiplies."""
    path = tmp_path / "big.gguf"
    rng = np.random.default_rng(3)
    arrays = {"m32": rng.standard_normal((6, 64)).astype(np.float32), "m16": rng.standard_normal((5, 32)).astype(np.float16),
              "v": rng.standard_normal(33).astype(np.float32), "ids": np.arange(-3, 4, dtype=np.int32)}
    bf16 = (rng.standard_normal((3, 32)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    for name, a in arrays.items():
        w.add_tensor(name, a.copy())  # the writer byte-swaps in place
    w.add_tensor("bf16", bf16.copy(), raw_dtype=gguf.GGMLQuantizationType.BF16)
    finish_gguf(w, path)
    tensors = open_gguf(path).tensors
    for name, a in arrays.items():
        assert tensors[name].data.dtype == a.dtype and tensors[name].data.dtype.isnative, name
        assert np.array_equal(tensors[name].data, a), name
    assert tensors["bf16"].data.dtype == np.uint8 and tensors["bf16"].data.shape == (3, 64)
    assert np.array_equal(tensors["bf16"].data.view("<u2"), bf16)  # the bytes a little-endian file has
    x = rng.standard_normal(64).astype(np.float32)
    y = backend.matvec(backend.upload("F32", (6, 64), tensors["m32"].data), x)
    np.testing.assert_allclose(y, arrays["m32"].astype(np.float64) @ x, rtol=1e-5, atol=1e-5)


def test_big_endian_block_types_refused(tmp_path):
    """A quantized tensor of a big-endian file: its blocks' fp16 scales are
    byte-swapped (gguf-py's gguf_convert_endian.py), which vkq does not undo."""
    path = tmp_path / "big_q.gguf"
    w = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(64, np.float32))
    for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight"):
        w.add_tensor(name, random_weights(4, 64, "Q4_0", seed=1), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    finish_gguf(w, path)
    with pytest.raises(ValueError, match=r"big-endian.*2 block-quantized tensors \('blk.0.attn_q.weight' \(Q4_0\), "
                                         r"'blk.0.attn_k.weight' \(Q4_0\)\).*little-endian") as info:
        load_gguf(path)
    assert "\n" not in str(info.value) and "truncated" not in str(info.value)
