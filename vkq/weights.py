"""Uploaded weights: a matrix or an expert stack in device buffers.

`Backend.upload` makes them; Backend and Graph check them
(vkq.resolve.check_weights) before they reach a pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass

from .blocks.layout import MatrixLayout, RowRange
from .dispatch.config import PipelineConfig


@dataclass
class Buffer:
    """One device buffer of a matrix: its rows, and where each block field starts in it (words)."""

    rows: RowRange
    tensor: object  # kp.Tensor
    field_offsets: list[int]


class Weights:
    """A matrix (rows, K) or an expert stack (n_expert, rows, K) on the device."""

    def __init__(self, backend, layout: MatrixLayout, buffers: list[Buffer], shape: tuple[int, ...],
                 reserved: int = 0):
        """reserved: the bytes of `buffers` counted in the device's MemoryLedger
        (vkq.device.memory), given back by free() or when these weights are collected."""
        self.backend = backend
        self.layout = layout
        self.buffers = buffers
        self.shape = shape
        self.freed = False
        self._credit = backend.device.memory.credit_on_collect(self, reserved)
        self._calls: dict[tuple, object] = {}  # Backend's cached calls, per call key (shape, path, activations, ...)
        self._calls_by_config: dict[tuple, object] = {}  # the same pipeline, whichever key chose it
        self._configs: dict[tuple, PipelineConfig] = {}  # the dispatcher's choices (vkq.resolve)

    def free(self) -> None:
        """Release the device memory now; any later use is refused. Refused
        while a replay that reads these weights is in flight."""
        with self.backend._lock:
            if self.freed:
                return
            if any(g.in_flight and id(self) in g._weights for g in self.backend._in_flight):
                raise RuntimeError(f"cannot free {self!r} while a replay that reads it is in flight; wait() first")
            for call in self._calls_by_config.values():
                call.graph.destroy()
            self._calls.clear()
            self._calls_by_config.clear()
            self.backend._forget_many(self)
            for buf in self.buffers:
                buf.tensor.destroy()
            self._credit()
            self.freed = True

    @property
    def qtype(self) -> str:
        return self.layout.fmt.name

    @property
    def is_expert_stack(self) -> bool:
        return len(self.shape) == 3

    @property
    def nbytes(self) -> int:
        return self.layout.gguf_nbytes

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return f"<vkq.Weights {self.qtype} shape={self.shape} buffers={len(self.buffers)}{state}>"
