"""GGUF files: metadata and weights (memory-mapped), checked as they are parsed."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from .formats import FORMATS, get_format


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file, ready for `Backend.upload(t.qtype, t.shape, t.data)`."""

    name: str
    qtype: str  # ggml's type name; "GGML type N" for a type id neither the gguf package nor vkq knows
    shape: tuple[int, ...]  # numpy order: (rows, K) or (n_expert, rows, K); vectors (K,)
    # Raw bytes in GGUF order (memory-mapped); float and integer types as
    # numbers in native byte order; empty for a type id neither the gguf package nor vkq knows.
    data: np.ndarray

    def __repr__(self) -> str:  # (not the dataclass's: that prints the whole memory map)
        return f"GGUFTensor(name={self.name!r}, qtype={self.qtype!r}, shape={self.shape}, {self.data.nbytes} bytes)"


def load_gguf(path: str | Path) -> dict[str, GGUFTensor]:
    """The tensors of a GGUF file by name, in file order.

    Tensors of block types vkq does not support are left out of the result
    (`load_gguf_all` keeps them, with their ggml type name), and so are type
    ids neither the gguf package nor vkq knows (their size is unknown)."""
    return {t.name: t for t in load_gguf_all(path).values() if is_supported(t)}


def load_gguf_all(path: str | Path) -> dict[str, GGUFTensor]:
    return open_gguf(path).tensors


def is_supported(t: GGUFTensor) -> bool:
    """Whether vkq has the tensor's block type."""
    try:
        get_format(t.qtype)
    except ValueError:
        return False
    return True


def describe_unsupported(tensors: list[GGUFTensor]) -> str:
    """Tensors of types vkq lacks, in one line: 'N tensors of block types vkq
    does not support: a (TQ1_0), b (NVFP4)'; of many, per type its count,
    first and last names: 'TQ1_0: 30 tensors, blk.0.x ... blk.29.x'."""
    by_type: dict[str, list[str]] = {}
    for t in tensors:
        by_type.setdefault(t.qtype, []).append(t.name)
    if len(tensors) <= 8:
        listed = ", ".join(f"{t.name} ({t.qtype})" for t in tensors)
    else:
        listed = "; ".join(f"{q}: {len(n)} tensors, {n[0]} ... {n[-1]}" if len(n) > 2 else
                           f"{q}: {', '.join(n)}" for q, n in by_type.items())
    return f"{len(tensors)} tensor{'s' if len(tensors) > 1 else ''} of block types vkq does not support: {listed}"


@dataclass(frozen=True)
class GGUFFile:
    """A parsed GGUF file: its metadata values by key (str, int, float,
    bool, or a list of them) and its tensors by name, in file order."""

    path: Path
    metadata: dict[str, object]
    tensors: dict[str, GGUFTensor]
    data_offset: int  # where the tensor data starts


def open_gguf(path: str | Path) -> GGUFFile:
    """One parse of a file: metadata and every tensor (memory-mapped).

    A file that is not a whole, well-formed GGUF (truncated anywhere, garbage
    in its header, metadata or tensor infos, a dimension of 0, tensor data
    past its end, rows that are not whole blocks) is a ValueError naming the
    file and the first problem found. So is a big-endian file with block-quantized tensors: their
    blocks' multi-byte fields are byte-swapped there, which vkq does not undo
    (its float, integer and BF16 tensors come back in native byte order)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no GGUF file at {path}")
    if not path.is_file():  # a FIFO, a device: nothing to map, or no end
        raise ValueError(f"{path} is not a regular file; a GGUF file is read from one")
    try:
        return _parse(path)
    except Exception as e:  # noqa: BLE001 - any failure on bad bytes is the file's fault
        raise ValueError(f"{path} is not a readable GGUF file: {_reason(e)}") from None


class _Malformed(ValueError):
    """A check of the parse that knows what is wrong: its message is the reason."""


# GGUF metadata value types (gguf.GGUFValueType) of a fixed size: numpy type codes.
_SCALAR_TYPES = {0: "u1", 1: "i1", 2: "u2", 3: "i2", 4: "u4", 5: "i4", 6: "f4", 7: "?", 10: "u8", 11: "i8", 12: "f8"}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_NESTING = 3  # arrays of arrays: deeper than any writer makes
# Tensor types whose data the gguf package's reader gives as numbers (the
# others as bytes, a row per block row): the same views here.
_PLAIN = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
          "I32": np.int32, "I64": np.int64}
# Types given as bytes whose values are 16-bit words: byte-swapped from a big-endian file.
_WORDS = {"BF16": ">u2"}
# ggml type id -> (name, elements, bytes) of a block: the gguf package's table,
# and vkq's formats for the block types gguf does not know yet (Q2_0).
_TYPES = {int(t): (t.name, *gguf.GGML_QUANT_SIZES[t]) for t in gguf.GGMLQuantizationType if t in gguf.GGML_QUANT_SIZES}
_TYPES.update({int(f.ggml_type): (f.name, f.block_elems, f.block_bytes) for f in FORMATS.values()
               if int(f.ggml_type) not in _TYPES})


class _Cursor:
    """Reads a GGUF file's structure from its memory map, checking every
    count and length against the bytes left before reading it (a corrupt
    length must not make a parse allocate or loop far past the end of the
    file). String arrays (a vocabulary) are decoded in one pass over the map:
    the gguf package's reader takes seconds over their parts."""

    def __init__(self, path: Path):
        self.mm = np.memmap(path, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
        self.buf, self.size, self.pos = memoryview(self.mm), len(self.mm), 0
        if self.size < 24 or bytes(self.mm[:4]) != b"GGUF":
            raise ValueError("no GGUF header")
        self.order = "<" if int.from_bytes(bytes(self.mm[4:8]), "little") & 0xFFFF else ">"
        self.take(4, "magic")
        version = self.u32("version")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version}: vkq reads versions 2 and 3")
        self.n_tensors, self.n_kv = self.u64("tensor count"), self.u64("metadata count")
        self.need(self.n_kv * 12 + self.n_tensors * 24,  # their least sizes
                  f"{self.n_kv} metadata entries and {self.n_tensors} tensor infos")

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise ValueError(f"{what} at offset {self.pos} needs {n} bytes, {self.size - self.pos} left")

    def take(self, n: int, what: str) -> int:
        self.need(n, what)
        self.pos += n
        return self.pos - n

    def u32(self, what: str) -> int:
        return struct.unpack_from(self.order + "I", self.buf, self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack_from(self.order + "Q", self.buf, self.take(8, what))[0]

    def string(self, what: str) -> str:
        n = self.u64(f"{what} length")
        return bytes(self.buf[self.take(n, what):self.pos]).decode("utf-8")

    def value(self, vtype: int, what: str, depth: int = 0):
        if vtype in _SCALAR_TYPES:
            return self._scalars(vtype, 1, what)[0]
        if vtype == _STRING:
            return self.string(what)
        if vtype != _ARRAY or depth >= _MAX_NESTING:
            raise ValueError(f"{what}: value type {vtype} is not one GGUF has")
        itype, count = self.u32(f"{what} item type"), self.u64(f"{what} length")
        if itype in _SCALAR_TYPES:
            return self._scalars(itype, count, f"{what} ({count} items)")
        self.need(count * 8, f"{what} ({count} items)")  # each item at least a length
        if itype == _STRING:
            return self._strings(count, what)
        return [self.value(itype, what, depth + 1) for _ in range(count)]

    def _strings(self, count: int, what: str) -> list[str]:
        """count strings in a row: string()'s checks and results in one tight
        loop (a vocabulary is some 10^5 of them: the command's start waits)."""
        buf, size, pos, out = self.buf, self.size, self.pos, []
        length = struct.Struct(self.order + "Q").unpack_from
        for _ in range(count):
            if pos + 8 > size or pos + 8 + length(buf, pos)[0] > size:
                self.pos = pos
                return [*out, self.string(what)]  # (raises, with string()'s words)
            end = pos + 8 + length(buf, pos)[0]
            out.append(str(buf[pos + 8:end], "utf-8"))
            pos = end
        self.pos = pos
        return out

    def _scalars(self, vtype: int, count: int, what: str) -> list:
        dtype = np.dtype(_SCALAR_TYPES[vtype]).newbyteorder(self.order)
        return np.frombuffer(self.buf, dtype, count, self.take(count * dtype.itemsize, what)).tolist()

    def metadata(self, n: int, until: str | None = None) -> dict[str, object]:
        """The next n metadata entries (fewer if key `until` comes first)."""
        meta: dict[str, object] = {}
        for i in range(n):
            key = self.string(f"metadata key {i}")
            if key in meta:
                raise ValueError(f"metadata key {key[:80]!r} appears twice")
            meta[key] = self.value(self.u32(f"metadata {key[:80]!r} value type"), f"metadata {key[:80]!r}")
            if key == until:
                break
        return meta


def read_metadata_head(path: str | Path, key: str, max_keys: int) -> object | None:
    """Metadata `key` if it is among the file's first max_keys entries
    (GGUF writers put general.* first), without parsing the rest; None
    otherwise, and for a file that is no GGUF: the full parse decides."""
    try:
        c = _Cursor(Path(path))
        return c.metadata(min(c.n_kv, max_keys), until=key).get(key)
    except (OSError, ValueError):
        return None


def _parse(path: Path) -> GGUFFile:
    """The header, metadata and tensor infos, checked and decoded (_Cursor);
    the tensors as views of the memory map."""
    c = _Cursor(path)
    meta = c.metadata(c.n_kv)
    infos = []
    for i in range(c.n_tensors):
        name = c.string(f"tensor {i} name")
        n_dims = c.u32(f"tensor {i} dimension count")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise ValueError(f"tensor {i} has {n_dims} dimensions")
        dims = [c.u64(f"tensor {name!r} dimension") for _ in range(n_dims)]
        infos.append((name, dims, c.u32(f"tensor {name!r} type"), c.u64(f"tensor {name!r} offset")))
    mm, size, order = c.mm, c.size, c.order

    alignment = meta.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"general.alignment {alignment!r} is not a power of two")
    data_offset = -(-c.pos // alignment) * alignment
    tensors: dict[str, GGUFTensor] = {}
    spans = []  # (start, bytes, name) of each tensor's data: no two may overlap
    swapped_blocks = []  # a big-endian file's block-quantized tensors
    for name, dims, type_id, offset in infos:
        if name in tensors:
            raise ValueError(f"tensor {name!r} appears twice")
        # GGUF lists dimensions innermost first; numpy order is the reverse.
        shape = tuple(int(d) for d in reversed(dims))
        if 0 in shape:  # ggml has no tensor of no elements
            raise _Malformed(f"tensor {name!r} has a dimension of 0 (shape {shape})")
        if type_id not in _TYPES:  # a newer ggml's type: its size is unknown, nothing of it is read
            tensors[name] = GGUFTensor(name, f"GGML type {type_id}", shape, np.zeros(0, np.uint8))
            continue
        qtype, block, block_bytes = _TYPES[type_id]
        if dims[0] % block:
            raise _Malformed(f"tensor {name!r} ({qtype}) has rows of {dims[0]} elements, not a whole number "
                             f"of {qtype} blocks ({block} elements)")
        n_bytes = int(np.prod(dims, dtype=object)) // block * block_bytes
        start = data_offset + offset
        if start + n_bytes > size:
            raise ValueError(f"tensor {name!r} ({qtype}, {n_bytes} bytes at offset {start}) ends past "
                             f"the end of the file ({size} bytes)")
        data = mm[start:start + n_bytes]
        if qtype in _PLAIN:
            data = data.view(np.dtype(_PLAIN[qtype]).newbyteorder(order)).reshape(shape)
        else:  # a row of blocks per row, as the gguf package's reader gives them
            data = data.reshape(*shape[:-1], shape[-1] // block * block_bytes)
        if order == ">":
            if qtype in _PLAIN:
                data = data.astype(data.dtype.newbyteorder("="))  # a copy, in native order
            elif qtype in _WORDS:
                data = data.view(_WORDS[qtype]).astype(_WORDS[qtype][1:]).view(np.uint8)
            else:
                swapped_blocks.append(f"{name!r} ({qtype})")
        tensors[name] = GGUFTensor(name, qtype, shape, data)
        if n_bytes:
            spans.append((start, n_bytes, name))
    spans.sort()
    for (start, n, name), (next_start, _, next_name) in zip(spans, spans[1:]):
        if start + n > next_start:
            raise ValueError(f"the data of tensors {name!r} and {next_name!r} overlap")
    if swapped_blocks:
        # Their blocks' fp16 scales and 16-bit words are byte-swapped (gguf-py's
        # gguf_convert_endian.py), each type in its own way: refused, not read wrongly.
        listed = ", ".join(swapped_blocks[:3]) + (", ..." if len(swapped_blocks) > 3 else "")
        raise _Malformed(f"a big-endian GGUF with {len(swapped_blocks)} block-quantized tensors ({listed}); vkq "
                         f"reads their blocks from little-endian files only: convert the file to little-endian")
    return GGUFFile(path, meta, tensors, data_offset)


def _reason(e: Exception) -> str:
    """One line for whatever the parse raised."""
    if isinstance(e, _Malformed):
        return str(e)
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"truncated or corrupt ({type(e).__name__}{': ' + text[:200] if text else ''})"


_REQUIRED = object()


def metadata(file: GGUFFile, key: str, default=_REQUIRED):
    """A metadata value; a missing required key is a ValueError naming it."""
    if key not in file.metadata:
        if default is _REQUIRED:
            raise ValueError(f"{file.path.name}: metadata key {key!r} is missing")
        return default
    return file.metadata[key]
