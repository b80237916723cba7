"""A GGUF file with tensors of block types vkq lacks: ggml types vkq has no
shader for (Q8_K, Q8_1, F64) and a type id the gguf package does not
know. vkq.load_gguf leaves them out; `vkq compare` checks the rest and says
which ones it skipped, `vkq bench` refuses the file: each in one line that
names every such tensor with its type."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import vkq
from vkq.blocks.formats import FORMATS
from vkq.commands import cli

from conftest import finish_gguf
from ggml_quant import random_weights

ROWS, K = 8, 256
LACKING = ("Q8_K", "Q8_1", "F64")
UNKNOWN_ID = 99  # no ggml type has it (yet)


def raw_blocks(qtype: str, rows: int, seed: int) -> np.ndarray:
    """Random bytes of a rows x K matrix of qtype (nothing reads their values)."""
    block, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    return np.random.default_rng(seed).integers(0, 256, (rows, K // block * block_bytes), dtype=np.uint8)


def write_model(path, lacking: dict[str, str], unknown: list[str]):
    """blk.0.attn_q.weight in Q4_0 (vkq has it), the `lacking` tensors in
    their types, and the `unknown` ones with type id UNKNOWN_ID (written as
    Q4_0, the id patched in afterwards: the gguf package cannot write it)."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("blk.0.attn_q.weight", random_weights(ROWS, K, "Q4_0", seed=1),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    for i, (name, qtype) in enumerate(lacking.items()):
        w.add_tensor(name, raw_blocks(qtype, ROWS, i), raw_dtype=gguf.GGMLQuantizationType[qtype])
    for name in unknown:
        w.add_tensor(name, random_weights(ROWS, K, "Q4_0", seed=2), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    finish_gguf(w, path)
    data = bytearray(path.read_bytes())
    for t in gguf.GGUFReader(path).tensors:
        if t.name in unknown:
            type_at = t.field.offset + 8 + len(t.name.encode()) + 4 + 8 * len(t.shape)
            assert data[type_at:type_at + 4] == int(gguf.GGMLQuantizationType.Q4_0).to_bytes(4, "little")
            data[type_at:type_at + 4] = UNKNOWN_ID.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    lacking = {"blk.0.ffn_up.weight": "Q8_K", "blk.0.ffn_down.weight": "Q8_1", "output.weight": "F64"}
    unknown = ["blk.0.ffn_gate.weight"]
    path = write_model(tmp_path_factory.mktemp("lacking") / "lacking.gguf", lacking, unknown)
    named = [f"{name} ({qtype})" for name, qtype in lacking.items()] + [f"{n} (GGML type {UNKNOWN_ID})" for n in unknown]
    return path, named


def test_types_are_still_lacking():
    """If vkq gains one of these types, this file must pick another."""
    assert not set(LACKING) & set(FORMATS)
    assert UNKNOWN_ID not in {int(t) for t in gguf.GGMLQuantizationType}


def test_load_gguf_leaves_them_out(model):
    path, _ = model
    assert list(vkq.load_gguf(path)) == ["blk.0.attn_q.weight"]


def test_upload_names_the_type(model, backend):
    path, _ = model
    t = vkq.blocks.gguf_io.load_gguf_all(path)["blk.0.ffn_up.weight"]
    with pytest.raises(ValueError, match="Q8_K"):
        backend.upload(t.qtype, t.shape, t.data)


def one_line_naming(text: str, named: list[str]) -> str:
    """The one line of text that names the tensors (it must name all of them)."""
    lines = [line for line in text.splitlines() if any(n in line for n in named)]
    assert len(lines) == 1, text
    for n in named:
        assert n in lines[0], lines[0]
    return lines[0]


def test_compare_checks_the_rest_and_names_them(model, capsys):
    path, named = model
    assert cli.main(["compare", str(path)]) == 0
    out = capsys.readouterr().out
    line = one_line_naming(out, named)
    assert line.startswith(f"skipped {len(named)} tensors of block types vkq does not support: ")
    assert "blk.0.attn_q.weight" in out and "PASS" in out


def test_compare_with_nothing_to_check(tmp_path, capsys):
    path = tmp_path / "only_lacking.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_tensor("blk.0.ffn_up.weight", raw_blocks("Q8_1", ROWS, 0), raw_dtype=gguf.GGMLQuantizationType.Q8_1)
    finish_gguf(w, path)
    assert cli.main(["compare", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vkq compare: error: ") and "blk.0.ffn_up.weight (Q8_1)" in err[0], err


def test_bench_refuses_naming_them(model, capsys):
    path, named = model
    assert cli.main(["bench", "-n", "1", "-r", "1", "-m", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vkq bench: error: "), err
    one_line_naming(err[0], named)


def test_many_stay_one_line(tmp_path, capsys):
    """30 layers of a lacking type: one line, with their count, the first and the last."""
    lacking = {f"blk.{i}.ffn_down.weight": "Q8_K" for i in range(30)}
    path = write_model(tmp_path / "many.gguf", lacking, [])
    assert cli.main(["bench", "-n", "1", "-r", "1", "-m", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "30 tensors" in err[0] and "Q8_K" in err[0]
    assert "blk.0.ffn_down.weight" in err[0] and "blk.29.ffn_down.weight" in err[0]
