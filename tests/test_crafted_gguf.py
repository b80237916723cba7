"""Crafted GGUF files: each is a ValueError (or OSError) of one line from
vkq.load_gguf, and one line with exit status 2 from the CLI: never a crash,
a hang, an allocation of the claimed size, or tensors read from the wrong
bytes.

A small file written by the gguf package has single fields patched: a
tensor dimension whose byte size overflows 64 bits or that is 0, a data
offset past the end of the file or onto another tensor's bytes,
general.alignment 0 or not a power of two. A FIFO and /dev/zero are given as the path.
"""
from __future__ import annotations

import os
import threading

import gguf
import numpy as np
import pytest

import vkq
from vkq.commands import cli

from conftest import finish_gguf
from ggml_quant import random_weights


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Two Q8_0 matrices and an F32 vector, alignment 64; (path, bytes, reader)."""
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    for name in ("a.weight", "b.weight"):
        w.add_tensor(name, random_weights(8, 64, "Q8_0", seed=1), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("c.weight", np.ones(64, np.float32))
    finish_gguf(w, path)
    return path, path.read_bytes(), gguf.GGUFReader(path)


def value_offset(field) -> int:
    """Where a reader field's last part (its value) starts in the file."""
    return field.offset + sum(int(p.nbytes) for p in field.parts[:-1])


def patched(small, tmp_path, offset: int, value: int, size: int = 8):
    _, data, _ = small
    out = tmp_path / "crafted.gguf"
    out.write_bytes(data[:offset] + int(value).to_bytes(size, "little") + data[offset + size:])
    return out


def tensor_field(reader, name):
    return next(t.field for t in reader.tensors if t.name == name)


def dims_offset(field, dim: int) -> int:
    """The offset of a tensor info's dimension `dim` (after name length, name, n_dims)."""
    return field.offset + 8 + int(field.parts[1].nbytes) + 4 + 8 * dim


def assert_refused(path, match: str) -> None:
    with pytest.raises(ValueError, match=match) as e:
        vkq.load_gguf(path)
    assert "\n" not in str(e.value)


def assert_cli_refuses(capsys, path) -> None:
    assert cli.main(["compare", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vkq compare: error: "), err


def test_the_untouched_file_loads(small):
    path, _, _ = small
    assert list(vkq.load_gguf(path)) == ["a.weight", "b.weight", "c.weight"]


@pytest.mark.parametrize("dims", [(2**32, 2**32), (2**63, 2**63), (2**64 - 1, 2)])
def test_dimensions_whose_byte_size_overflows(small, tmp_path, capsys, dims):
    """F32 c.weight given two dimensions: 2^32 x 2^32 x 4 bytes is 0 modulo
    2^64, the size a C reader without overflow checks would compute."""
    _, _, reader = small
    field = tensor_field(reader, "c.weight")
    _, data, _ = small
    start = field.offset + 8 + int(field.parts[1].nbytes)
    # c.weight has one dimension: rewrite its n_dims and dimension as two
    body = (2).to_bytes(4, "little") + b"".join(int(d).to_bytes(8, "little") for d in dims)
    rest = data[start + 4 + 8:]
    out = tmp_path / "crafted.gguf"
    out.write_bytes(data[:start] + body + rest)
    assert_refused(out, "ends past the end of the file")
    assert_cli_refuses(capsys, out)


@pytest.mark.parametrize("dim", [0, 1], ids=["K", "rows"])
def test_a_dimension_of_zero(small, tmp_path, capsys, dim):
    """A tensor of no elements (ggml has none): named with the file, not an
    upload error that names neither (vkq compare)."""
    _, _, reader = small
    out = patched(small, tmp_path, dims_offset(tensor_field(reader, "a.weight"), dim), 0)
    assert_refused(out, r"crafted.gguf is not a readable GGUF file: tensor 'a.weight' has a dimension of 0")
    assert_cli_refuses(capsys, out)


def test_data_offset_past_the_end(small, tmp_path, capsys):
    path, data, reader = small
    field = tensor_field(reader, "b.weight")
    out = patched(small, tmp_path, value_offset(field), 2**62)
    assert_refused(out, "ends past the end of the file")
    assert_cli_refuses(capsys, out)


def test_data_offsets_that_overlap(small, tmp_path, capsys):
    """b.weight's data given at a.weight's offset: two tensors over the same bytes."""
    _, _, reader = small
    a = tensor_field(reader, "a.weight")
    b = tensor_field(reader, "b.weight")
    a_offset = int(a.parts[-1][0])
    out = patched(small, tmp_path, value_offset(b), a_offset + 64)  # into a.weight's 272 bytes
    assert_refused(out, "overlap")
    assert_cli_refuses(capsys, out)


@pytest.mark.parametrize("alignment", [0, 3, 48, 2**31 + 1])
def test_alignment_zero_or_not_a_power_of_two(small, tmp_path, capsys, alignment):
    _, _, reader = small
    out = patched(small, tmp_path, value_offset(reader.fields["general.alignment"]), alignment, size=4)
    assert_refused(out, "general.alignment")
    assert_cli_refuses(capsys, out)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, capsys):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    done = []

    def load():
        try:
            vkq.load_gguf(fifo)
        except (ValueError, OSError) as e:
            done.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # free the thread: a writer end lets its open() return
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_gguf waited on a FIFO")
    assert len(done) == 1 and "not a regular file" in str(done[0])
    assert_cli_one_line(capsys, fifo)


def test_dev_zero_is_refused(capsys):
    with pytest.raises((ValueError, OSError), match="not a regular file"):
        vkq.load_gguf("/dev/zero")
    assert_cli_one_line(capsys, "/dev/zero")


def assert_cli_one_line(capsys, path) -> None:
    """compare and generate name the problem; bench -m takes a name that
    does not end in .gguf for a preset, and says so."""
    for argv in (["compare", str(path)], ["generate", str(path), "-p", "hi"], ["bench", "-m", str(path)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"vkq {argv[0]}: error: "), (argv, err)
        assert argv[0] == "bench" and str(path).endswith("zero") or "not a regular file" in err[0], (argv, err)
