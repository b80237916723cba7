"""Weights straight from GGUF files, through the gguf package's reader."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from .formats import get_format


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file, ready for `Backend.upload(t.qtype, t.shape, t.data)`."""

    name: str
    qtype: str
    shape: tuple[int, ...]  # numpy order: (rows, K) or (n_expert, rows, K); vectors (K,)
    data: np.ndarray  # raw bytes in GGUF order (memory-mapped)


def load_gguf(path: str | Path) -> dict[str, GGUFTensor]:
    """The tensors of a GGUF file by name, in file order.

    Tensors of block types vkq does not support are left out of the result
    (`load_gguf_all` keeps them, with their ggml type name)."""
    out = {}
    for t in load_gguf_all(path).values():
        try:
            get_format(t.qtype)
        except ValueError:
            continue
        out[t.name] = t
    return out


def load_gguf_all(path: str | Path) -> dict[str, GGUFTensor]:
    return open_gguf(path)[1]


def open_gguf(path: str | Path) -> tuple[gguf.GGUFReader, dict[str, GGUFTensor]]:
    """One parse of a file (seconds for a large vocabulary): the reader, for
    metadata, and every tensor, in file order.

    A file that is not a whole, well-formed GGUF (truncated anywhere, garbage
    in its header, metadata or tensor infos, tensor data past its end) is a
    ValueError naming the file and the first problem found."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    try:
        check_structure(path)
        reader = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - the gguf reader fails on bad bytes with any kind of error
        raise ValueError(f"{path} is not a readable GGUF file: {_reason(e)}") from None
    size = path.stat().st_size
    out = {}
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size or t.data.nbytes != t.n_bytes:
            raise ValueError(f"{path} is not a readable GGUF file: tensor {t.name!r} ({t.tensor_type.name}, "
                             f"{t.n_bytes} bytes at offset {t.data_offset}) ends past the end of the file "
                             f"({size} bytes): truncated or corrupt")
        # GGUF lists dimensions innermost first; numpy order is the reverse.
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        out[t.name] = GGUFTensor(t.name, t.tensor_type.name, shape, t.data)
    return reader, out


# GGUF metadata value types (GGUFValueType) of a fixed size, in bytes.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS


def check_structure(path: Path) -> None:
    """Walk a GGUF file's header, metadata and tensor infos, checking every
    count and length against the bytes left (ValueError at the first that
    does not fit). The gguf reader trusts them: a corrupt array length makes
    it loop, allocating, far past the end of the file."""
    mm = np.memmap(path, mode="r") if path.stat().st_size else b""
    size = len(mm)
    pos = 0

    def need(n: int, what: str) -> None:
        if pos + n > size:
            raise ValueError(f"{what} at offset {pos} needs {n} bytes, {size - pos} left")

    def take(n: int, what: str) -> int:
        nonlocal pos
        need(n, what)
        pos += n
        return pos - n

    if size < 24 or bytes(mm[:4]) != b"GGUF":
        raise ValueError("no GGUF header")
    order = "<" if int.from_bytes(bytes(mm[4:8]), "little") & 0xFFFF else ">"

    def u32(what: str) -> int:
        return struct.unpack_from(order + "I", mm, take(4, what))[0]

    def u64(what: str) -> int:
        return struct.unpack_from(order + "Q", mm, take(8, what))[0]

    def value(vtype: int, what: str, depth: int = 0) -> None:
        if vtype in _SCALAR_BYTES:
            take(_SCALAR_BYTES[vtype], what)
        elif vtype == _STRING:
            take(u64(f"{what} length"), what)
        elif vtype == _ARRAY and depth < 3:
            itype, count = u32(f"{what} item type"), u64(f"{what} length")
            if itype in _SCALAR_BYTES:
                take(count * _SCALAR_BYTES[itype], f"{what} ({count} items)")
                return
            need(count * 8, f"{what} ({count} items)")  # each item at least a length
            for _ in range(count):
                value(itype, what, depth + 1)
        else:
            raise ValueError(f"{what}: value type {vtype} is not one GGUF has")

    take(8, "magic and version")
    n_tensors, n_kv = u64("tensor count"), u64("metadata count")
    need(n_kv * 12 + n_tensors * 24, f"{n_kv} metadata entries and {n_tensors} tensor infos")  # their least sizes
    for i in range(n_kv):
        start = take(u64(f"metadata key {i} length"), f"metadata key {i}")
        key = bytes(mm[start:pos]).decode("utf-8", "replace")[:80]
        value(u32(f"metadata {key!r} value type"), f"metadata {key!r}")
    for i in range(n_tensors):
        take(u64(f"tensor {i} name length"), f"tensor {i} name")
        n_dims = u32(f"tensor {i} dimension count")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise ValueError(f"tensor {i} has {n_dims} dimensions")
        take(8 * n_dims + 4 + 8, f"tensor {i} dimensions, type and offset")


def _reason(e: Exception) -> str:
    """One line for whatever the gguf reader raised."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"truncated or corrupt ({type(e).__name__}{': ' + text[:200] if text else ''})"


_REQUIRED = object()


def metadata(reader: gguf.GGUFReader, path: Path, key: str, default=_REQUIRED):
    """A metadata value; a missing required key is a ValueError naming it."""
    f = reader.get_field(key)
    if f is None:
        if default is _REQUIRED:
            raise ValueError(f"{Path(path).name}: metadata key {key!r} is missing")
        return default
    return f.contents()
