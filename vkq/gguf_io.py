"""Weights straight from GGUF files, through the gguf package's reader."""
from __future__ import annotations

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
    metadata, and every tensor, in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError) as e:
        raise ValueError(f"{path} is not a readable GGUF file: {e}") from None
    out = {}
    for t in reader.tensors:
        # GGUF lists dimensions innermost first; numpy order is the reverse.
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        out[t.name] = GGUFTensor(t.name, t.tensor_type.name, shape, t.data)
    return reader, out


_REQUIRED = object()


def metadata(reader: gguf.GGUFReader, path: Path, key: str, default=_REQUIRED):
    """A metadata value; a missing required key is a ValueError naming it."""
    f = reader.get_field(key)
    if f is None:
        if default is _REQUIRED:
            raise ValueError(f"{Path(path).name}: metadata key {key!r} is missing")
        return default
    return f.contents()
