"""A corrupt GGUF is a ValueError from vkq.load_gguf and one line, exit 2, from the CLI.

A small real GGUF (written by the gguf package's writer, with the metadata
kinds a model has: strings, arrays of strings and numbers) is truncated at
every offset of its header, metadata and tensor infos and at steps through
its data, and has bytes overwritten at seeded random places. Each result
either loads (the damage hit a value, not the structure: every tensor then
lies inside the file) or raises ValueError; nothing else escapes.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import vkq
from vkq.blocks.formats import get_format
from vkq.blocks.gguf_io import open_gguf
from vkq.commands import cli

from conftest import finish_gguf
from ggml_quant import random_weights

H, FF = 64, 128  # hidden and feed-forward sizes of the tiny model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """A one-layer llama-named GGUF of a few KiB; returns (path, bytes, data_offset)."""
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(H)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(12)])
    w.add_token_scores([float(i) for i in range(12)])
    w.add_string("general.name", "tiny corrupt-me")
    for name, qtype, (rows, k) in [("blk.0.attn_q.weight", "Q4_0", (H, H)), ("blk.0.ffn_up.weight", "Q8_0", (FF, H)),
                                   ("output.weight", "Q4_K", (16, 256))]:
        w.add_tensor(name, random_weights(rows, k, qtype, seed=1), raw_dtype=gguf.GGMLQuantizationType[qtype])
    w.add_tensor("blk.0.attn_norm.weight", np.ones(H, np.float32))
    finish_gguf(w, path)
    return path, path.read_bytes(), open_gguf(path).data_offset


def load_or_value_error(path) -> dict | None:
    """vkq.load_gguf's result, or None when it raised ValueError (anything else fails the test)."""
    try:
        tensors = vkq.load_gguf(path)
    except ValueError as e:
        assert str(e).strip() and "\n" not in str(e), f"not one line: {e!r}"
        return None
    size = path.stat().st_size
    for t in tensors.values():
        assert t.data.nbytes == get_format(t.qtype).row_bytes(t.shape[-1]) * int(np.prod(t.shape[:-1])) or len(t.shape) == 1
        assert np.asarray(t.data).size <= size
    return tensors


def test_intact_file_loads(tiny_gguf):
    path, _, _ = tiny_gguf
    assert set(vkq.load_gguf(path)) == {"blk.0.attn_q.weight", "blk.0.ffn_up.weight", "output.weight",
                                         "blk.0.attn_norm.weight"}


def test_truncated_anywhere(tiny_gguf, tmp_path):
    _, data, data_offset = tiny_gguf
    cut = tmp_path / "cut.gguf"
    # every byte of the header, metadata and tensor infos; then steps through the data
    offsets = list(range(0, data_offset + 1)) + list(range(data_offset + 1, len(data), 97)) + [len(data) - 1]
    for n in offsets:
        cut.write_bytes(data[:n])
        assert load_or_value_error(cut) is None, f"truncated to {n} of {len(data)} bytes: loaded"


@pytest.mark.parametrize("seed", range(4))
def test_bytes_overwritten(tiny_gguf, tmp_path, seed):
    """300 files per seed, each with 1-3 bytes of its structure (or, one in
    five, of anywhere) overwritten by random values."""
    _, data, data_offset = tiny_gguf
    rng = np.random.default_rng(seed)
    bad = tmp_path / "bad.gguf"
    loaded = refused = 0
    for _ in range(300):
        buf = bytearray(data)
        end = len(data) if rng.random() < 0.2 else data_offset
        for pos in rng.integers(0, end, rng.integers(1, 4)):
            buf[pos] = int(rng.integers(0, 256))
        bad.write_bytes(bytes(buf))
        if load_or_value_error(bad) is None:
            refused += 1
        else:
            loaded += 1
    assert refused > 50 and loaded > 0, (refused, loaded)  # the fuzzing reached both outcomes


def _patch_u64(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + int(value).to_bytes(8, "little") + data[offset + 8:]


def test_structure_fields_out_of_range(tiny_gguf, tmp_path):
    """Counts, lengths and tensor data offsets far past the end of the file."""
    path, data, _ = tiny_gguf
    reader = gguf.GGUFReader(path)
    bad = tmp_path / "bad.gguf"
    cases = {"tensor count": (reader.fields["GGUF.tensor_count"].offset, 2**62),
             "metadata count": (reader.fields["GGUF.kv_count"].offset, 2**40)}
    name_field = reader.fields["general.name"]
    cases["string length"] = (name_field.offset + 8 + len("general.name") + 4, 2**50)
    t = reader.tensors[-1]
    field_bytes = sum(int(part.nbytes) for part in t.field.parts)
    cases["tensor data offset"] = (t.field.offset + field_bytes - 8, len(data))
    cases["tensor dimension"] = (t.field.offset + 8 + len(t.name) + 4, 2**33)
    for what, (offset, value) in cases.items():
        bad.write_bytes(_patch_u64(data, offset, value))
        with pytest.raises(ValueError, match="not a readable GGUF file"):
            vkq.load_gguf(bad)


@pytest.mark.parametrize("argv", [["compare"], ["bench", "-n", "1", "-r", "1", "-m"]], ids=["compare", "bench"])
def test_cli_one_line_exit_2(tiny_gguf, tmp_path, capsys, argv):
    _, data, data_offset = tiny_gguf
    for n, name in [(data_offset // 2, "metadata"), (len(data) - 100, "data")]:
        cut = tmp_path / f"cut-{name}.gguf"
        cut.write_bytes(data[:n])
        assert cli.main(argv + [str(cut)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"vkq {argv[0]}: error: ") and "GGUF" in err[0], err
