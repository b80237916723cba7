"""A llama model's weight mat-vecs, host-driven: one call per group of matrices.

Matrices of one stage that read the same input and share a block type
(Q/K/V, FFN gate/up) form a group: uploaded as one matrix, their rows
stacked, and multiplied in one call. `VkqMatvecs` calls Backend.matvec
(one submit per call); `NumpyMatvecs` is the float64 reference on weights
the gguf package dequantizes. The GPU step (vkq.llama.gpu_step) records
the same groups' uploads into its graph.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..backend import Backend
from ..dispatch.paths import resolve_path
from ..gguf_io import GGUFTensor


@dataclass(frozen=True)
class Group:
    """Matrices multiplied by one input in one call: their rows stacked."""

    names: tuple[str, ...]
    rows: tuple[int, ...]
    qtype: str
    k: int

    @property
    def offsets(self) -> tuple[int, ...]:
        """The first row of each matrix in the stacked result."""
        return tuple(int(o) for o in np.cumsum((0,) + self.rows[:-1]))


def make_groups(tensors: dict[str, GGUFTensor], names: list[str], fuse: bool) -> list[Group]:
    """Consecutive matrices of one block type and K, stacked (fuse), or one group each."""
    out: list[Group] = []
    for n in names:
        t = tensors[n]
        if fuse and out and out[-1].qtype == t.qtype and out[-1].k == t.shape[1]:
            g = out[-1]
            out[-1] = Group(g.names + (n,), g.rows + (t.shape[0],), g.qtype, g.k)
        else:
            out.append(Group((n,), (t.shape[0],), t.qtype, t.shape[1]))
    return out


def raw_bytes(tensors: dict[str, GGUFTensor], group: Group) -> np.ndarray:
    """The group's GGUF bytes, its matrices' rows one after the other."""
    parts = [np.ascontiguousarray(tensors[n].data).reshape(-1).view(np.uint8) for n in group.names]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


class Matvecs(ABC):
    """The model's weight mat-vecs, timed. `run(names, x)`: x float32 (n, K) ->
    one float32 (n, rows) array per matrix of the group."""

    def __init__(self, groups: list[Group]):
        self.groups = {g.names: g for g in groups}
        self.seconds = 0.0
        self.calls = 0
        # Called as on_matvec(names, x, y) after each call (tests check every product).
        self.on_matvec: Callable[[tuple[str, ...], np.ndarray, np.ndarray], None] | None = None

    @abstractmethod
    def multiply(self, group: Group, x: np.ndarray) -> np.ndarray:
        """One call of the engine: x (n, K) -> (n, sum of the group's rows)."""

    def run(self, names: tuple[str, ...], x: np.ndarray) -> list[np.ndarray]:
        group = self.groups[names]
        t0 = time.perf_counter()
        y = self.multiply(group, x)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        if self.on_matvec is not None:
            self.on_matvec(names, x, y)
        return np.split(y, np.cumsum(group.rows)[:-1], axis=1)


class VkqMatvecs(Matvecs):
    """Every mat-vec a `Backend.matvec` on weights uploaded once."""

    def __init__(self, tensors, groups, backend: Backend, path: str, activations: str):
        super().__init__(groups)
        self.backend = backend
        self.path = path
        self.activations = activations
        self.weights = {g.names: backend.upload(g.qtype, (sum(g.rows), g.k), raw_bytes(tensors, g)) for g in groups}

    def multiply(self, group, x):
        w = self.weights[group.names]
        path, act = resolve_path(w.layout.fmt, self.path), self.activations
        if x.shape[0] == 1:
            return self.backend.matvec(w, x[0], path=path, activations=act)[None]
        return self.backend.matvec(w, np.ascontiguousarray(x.T), path=path, activations=act).T


class NumpyMatvecs(Matvecs):
    """The reference: float64 numpy on weights the gguf package dequantizes."""

    def __init__(self, tensors, groups):
        from ..reference import dequantize

        super().__init__(groups)
        self.weights = {}
        for g in groups:
            parts = [dequantize(tensors[n].qtype, tensors[n].shape, tensors[n].data) for n in g.names]
            self.weights[g.names] = parts[0] if len(parts) == 1 else np.concatenate(parts)

    def multiply(self, group, x):
        return (x.astype(np.float64) @ self.weights[group.names].T).astype(np.float32)
