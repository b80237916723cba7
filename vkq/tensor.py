"""Device tensors: vectors that live on the GPU between operations and replays.

A `Tensor` holds `n` vectors of `length` values (float32, int32 or uint32)
in one device buffer, one vector after another, `stride` elements apart.
Float vectors are padded to a whole 32-value chunk so that a mat-vec can
read any of them as x (the padding stays zero: every writer writes
`length` values per vector). An engine writes its inputs from numpy in
place (no allocation), lets a `vkq.Graph` chain operations on the device,
and reads back only what it needs. A tensor is one device buffer, counted
against the device's limits (vkq.device.memory) until it is collected.
A tensor's host values go to the device
at the first replay of any graph that uses it (so a tensor written once
before that is a constant, e.g. a norm's weights) and at every replay of a
graph that takes it as input; writing one that no graph takes as input
after that is an error (the values would never reach the device). While a
replay that uses a tensor is in flight, the host can neither write nor read
it.

Memory order is one row per vector: `write` takes and `read` returns
(length,) for one vector or (n, length) for several (as matvec_id returns
(n_used, rows)); Backend.matvec's x (K, n) is the column convention of a
matrix product, a tensor's (n, K) is the vectors themselves.
"""
from __future__ import annotations

import numpy as np

from .blocks.formats import CHUNK

DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32))


def host_values(values, dtype, what: str) -> np.ndarray:
    """`values` as `dtype` (float32, int32 or uint32), converted as numpy
    users expect: float16 and float64 to float32 (rounded; refused where a
    finite value overflows float32's range, since it would become inf),
    integers of another width or sign to int32 / uint32 (refused where one
    does not fit). Integers for floats, floats for integers, booleans and
    anything but a numpy array are refused (TypeError): a mat-vec of token
    ids, or ids read from a float array, is a mistake, not a conversion."""
    dtype = np.dtype(dtype)
    floating = dtype.kind == "f"
    kinds, kind_name = ("f", "floating-point") if floating else ("iu", "integer")
    if not isinstance(values, np.ndarray):
        raise TypeError(f"{what} must be a numpy array ({dtype.name}, or another {kind_name} dtype, converted), "
                        f"got {type(values).__name__}")
    if values.dtype.kind not in kinds:
        raise TypeError(f"{what} must be {dtype.name} (or another {kind_name} dtype, converted), "
                        f"got dtype {values.dtype}")
    if values.dtype == dtype:
        return values
    if floating:
        with np.errstate(over="ignore"):
            converted = values.astype(dtype)
        overflow = np.isfinite(values) & ~np.isfinite(converted)
        if overflow.any():
            at = np.flatnonzero(overflow)[0]
            value = float(values.reshape(-1)[at])
            raise ValueError(f"{what} ({values.dtype}) holds {value!r} at flat index {at}, beyond float32's range "
                             f"(+-{np.finfo(np.float32).max:.3g}): vkq computes in float32")
        return converted
    limits = np.iinfo(dtype)
    if values.size and (values.min() < limits.min or values.max() > limits.max):
        bad = values[(values < limits.min) | (values > limits.max)]
        raise ValueError(f"{what} ({values.dtype}) holds {bad[:4].tolist()}, which {dtype.name} cannot hold")
    return values.astype(dtype)


def padded_stride(length: int, dtype) -> int:
    """Elements between vectors: float vectors padded to whole chunks."""
    return -(-length // CHUNK) * CHUNK if np.dtype(dtype) == np.float32 else length


class Tensor:
    """`n` vectors of `length` values on one backend's device."""

    def __init__(self, backend, length: int, n: int = 1, dtype=np.float32, name: str = ""):
        dtype = np.dtype(dtype)
        if dtype not in DTYPES:
            raise TypeError(f"a vkq.Tensor holds float32, int32 or uint32, not {dtype}")
        for what, v in (("length", length), ("n", n)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"tensor {what} must be a positive integer, got {v!r}")
        self.backend = backend
        self.length, self.n, self.dtype, self.name = int(length), int(n), dtype, name
        self.stride = padded_stride(self.length, dtype)
        # One buffer, counted in the device's ledger until the tensor is
        # collected (vkq.device.memory): refused before the driver sees it where
        # it passes one buffer's limit or the device's memory.
        memory = backend.device.memory
        reserved = memory.reserve([self.nbytes], f"a {dtype.name} tensor{f' {name!r}' if name else ''} of shape "
                                                  f"{self.shape}")
        try:
            self.kp = backend.device.tensor(self.n * self.stride, dtype)
        except BaseException:
            memory.release(reserved)
            raise
        memory.credit_on_collect(self, reserved)
        # A view of kp's host copy, made once: writes and reads go through it.
        self._host = self.kp.data().reshape(self.n, self.stride)
        self.is_input = False  # some graph takes it as input (Graph.input)
        self.is_output = False  # some graph brings it back (Graph.output)
        self.read_back = False  # a replay that brings it back has finished: read() has the device's values
        self.device_written = False  # some graph's operation writes it
        # int32 ids: the bound every device write so far keeps them under (an
        # op's `bounded_ids`, vkq.graph); None once any other op writes them.
        self.ids_bound: int | None = None
        # Device memory starts undefined; the first replay that uses the
        # tensor uploads its host values (zeros, or what was written), so
        # padding reads as zero and a tensor written once is a constant.
        self.on_device = False

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.length,) if self.n == 1 else (self.n, self.length)

    @property
    def nbytes(self) -> int:
        return self.n * self.stride * self.dtype.itemsize

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<vkq.Tensor{label} {self.dtype.name} shape={self.shape}>"

    def _check_idle(self, action: str) -> None:
        """(Called under the backend's lock, so that no replay starts between the check and the copy.)"""
        for g in self.backend._in_flight:
            if g.in_flight and id(self) in g._tensors:
                raise RuntimeError(f"cannot {action} {self!r} while a replay that uses it is in flight; wait() first")

    def write(self, values) -> None:
        """Host values for the next replay that takes this tensor as input
        (`Graph.input`), or for its first replay: (length,) or (n, length),
        this tensor's dtype (other widths converted: `host_values`)."""
        with self.backend._lock:
            self._check_idle("write")
            values = host_values(values, self.dtype, f"{self!r}.write's values")
            if values.shape != self.shape and not (self.n == 1 and values.shape == (1, self.length)):
                raise ValueError(f"{self!r}.write takes shape {self.shape}, got {values.shape}")
            if self.on_device and not self.is_input:
                raise RuntimeError(f"{self!r} went to the device at its first replay and is not an input of any "
                                   "graph (Graph.input): this write would never reach the device")
            self._host[:, : self.length] = values

    def read(self) -> np.ndarray:
        """The values the last replay brought back (`Graph.output`), copied:
        (length,) or (n, length). Refused for a graph's output until a
        replay has brought it back: its host copy would be zeros (or what was
        written before), not the device's values."""
        with self.backend._lock:
            self._check_idle("read")
            if self.is_output and not self.read_back:
                raise RuntimeError(f"{self!r} is a graph's output that no replay has brought back yet: run() the "
                                   "graph (or wait() for its replay) before read()")
            values = self._host[:, : self.length].copy()
        return values[0] if self.n == 1 else values
