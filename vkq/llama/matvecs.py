"""A llama model's weight mat-vecs, host-driven: one call per group of matrices.

Matrices of one stage that read the same input and share a block type
(Q/K/V, FFN gate/up) form a group: uploaded as one matrix, their rows
stacked, and multiplied in one call. Expert stacks (n_expert, rows, K) group
the same way, expert by expert (the gate and up stacks of a mixture-of-
experts layer: one MUL_MAT_ID gives both for each selected expert).
`VkqMatvecs` calls Backend.matvec / matvec_id (one submit per call), or
for a prompt's chunk of more than MAX_COLS tokens the tiled mat-mat,
Backend.matmul / matmul_id;
`NumpyMatvecs` is the float64 reference on weights the gguf package
dequantizes. The GPU step (vkq.llama.gpu_step) records the same groups'
uploads into its graph.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..backend import Backend
from ..blocks.gguf_io import GGUFTensor
from ..dispatch.paths import resolve_path
from ..resolve import MAX_COLS


def engine_label(engine: str, mode: str, ran: list[str], activations: str | None) -> str:
    """An engine's label for its statistics: the path asked for and the
    paths its mat-vecs run (`ran`, one per call: where "auto" or a fallback
    chose), and the int8 activations where some run the int8 path."""
    counts = {p: ran.count(p) for p in sorted(set(ran), key=ran.index)}
    what = "" if set(counts) == {mode} else ": mat-vecs " + (
        next(iter(counts)) if len(counts) == 1 else ", ".join(f"{p} {n}" for p, n in counts.items()))
    return f"engine {engine}, path {mode}{what}" + (f", int8 activations {activations}" if "mmvq" in counts else "")


@dataclass(frozen=True)
class Group:
    """Matrices multiplied by one input in one call: their rows stacked."""

    names: tuple[str, ...]
    rows: tuple[int, ...]  # of each matrix (of each expert, in a stack)
    qtype: str
    k: int
    n_expert: int = 0  # expert stacks: experts in each; 0: matrices

    @property
    def shape(self) -> tuple[int, ...]:
        """The uploaded shape: (rows, K), or (n_expert, rows, K)."""
        return ((self.n_expert,) if self.n_expert else ()) + (sum(self.rows), self.k)

    @property
    def offsets(self) -> tuple[int, ...]:
        """The first row of each matrix in the stacked result."""
        return tuple(int(o) for o in np.cumsum((0,) + self.rows[:-1]))


def make_groups(tensors: dict[str, GGUFTensor], names: list[str], fuse: bool) -> list[Group]:
    """Consecutive matrices (or expert stacks of as many experts) of one block
    type and K, stacked (fuse), or one group each."""
    out: list[Group] = []
    for n in names:
        t = tensors[n]
        n_expert = t.shape[0] if len(t.shape) == 3 else 0
        rows, k = t.shape[-2:]
        g = out[-1] if out else None
        if fuse and g is not None and (g.qtype, g.k, g.n_expert) == (t.qtype, k, n_expert):
            out[-1] = Group(g.names + (n,), g.rows + (rows,), g.qtype, g.k, n_expert)
        else:
            out.append(Group((n,), (rows,), t.qtype, k, n_expert))
    return out


def raw_bytes(tensors: dict[str, GGUFTensor], group: Group) -> np.ndarray:
    """The group's GGUF bytes: its matrices' rows one after the other (in an
    expert stack, expert by expert)."""
    experts = max(group.n_expert, 1)
    parts = [np.ascontiguousarray(tensors[n].data).reshape(-1).view(np.uint8).reshape(experts, -1)
             for n in group.names]
    return parts[0].reshape(-1) if len(parts) == 1 else np.concatenate(parts, axis=1).reshape(-1)


class Matvecs(ABC):
    """The model's weight mat-vecs, timed. `run(names, x)`: x float32 (n, K) ->
    one float32 (n, rows) array per matrix of the group. For expert stacks
    (MUL_MAT_ID) `ids` int32 (n, m) picks m experts for each row of x: the
    result has n * m rows, row i * m + j = W[ids[i, j]] @ x[i]."""

    def __init__(self, groups: list[Group]):
        self.groups = {g.names: g for g in groups}
        self.seconds = 0.0
        self.calls = 0
        # Called as on_matvec(names, x, y) after each call (tests check every product).
        self.on_matvec: Callable[[tuple[str, ...], np.ndarray, np.ndarray], None] | None = None

    @abstractmethod
    def multiply(self, group: Group, x: np.ndarray, ids: np.ndarray | None = None,
                 tiled: bool = False) -> np.ndarray:
        """One call of the engine: x (n, K) -> (n, sum of the group's rows);
        an expert stack's with ids (n, m) -> (n * m, rows). tiled: a
        prompt's chunk of more than MAX_COLS tokens, through the mat-mat
        (the device's engine; the reference's products are the same)."""

    def run(self, names: tuple[str, ...], x: np.ndarray, ids: np.ndarray | None = None,
            tiled: bool = False) -> list[np.ndarray]:
        group = self.groups[names]
        if (ids is None) != (group.n_expert == 0):
            raise ValueError(f"{names[0]}: ids go with expert stacks, and only with them")
        t0 = time.perf_counter()
        y = self.multiply(group, x, ids, tiled)
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
        self.weights = {g.names: backend.upload(g.qtype, g.shape, raw_bytes(tensors, g)) for g in groups}

    def multiply(self, group, x, ids=None, tiled=False):
        w = self.weights[group.names]
        path, act = resolve_path(w.layout.fmt, self.path), self.activations
        if tiled:
            return self._matmul(w, x, ids, path, act)
        if ids is not None:  # one x shared by a row's experts, or one per slot
            if x.shape[0] == 1:
                return self.backend.matvec_id(w, x[0], ids[0], path=path, activations=act)
            slots = np.repeat(x, ids.shape[1], axis=0)
            return self.backend.matvec_id(w, slots, ids.reshape(-1), path=path, activations=act)
        if x.shape[0] == 1:
            return self.backend.matvec(w, x[0], path=path, activations=act)[None]
        return self.backend.matvec(w, np.ascontiguousarray(x.T), path=path, activations=act).T


    def _matmul(self, w, x, ids, path: str, act: str) -> np.ndarray:
        """The tiled mat-mat over x's n rows, padded with zero columns (and
        expert 0) to matmul_columns(n): each column's bits do not depend on
        the others, and a prompt's chunks of any length share a few recorded
        calls (Backend keeps one per column count)."""
        n, k = x.shape
        m = matmul_columns(n)
        if ids is None:
            xt = np.zeros((k, m), np.float32)
            xt[:, :n] = x.T
            return self.backend.matmul(w, xt, path=path, activations=act)[:, :n].T
        xp = np.zeros((m, k), np.float32)
        xp[:n] = x
        idp = np.zeros((m, ids.shape[1]), np.int32)
        idp[:n] = ids
        return self.backend.matmul_id(w, xp, idp, path=path, activations=act)[:n].reshape(n * ids.shape[1], -1)


def matmul_columns(n: int) -> int:
    """The columns a mat-mat of n rows runs with: the next power of two, more than MAX_COLS."""
    return max(1 << (n - 1).bit_length(), 2 * MAX_COLS)


class NumpyMatvecs(Matvecs):
    """The reference: float64 numpy on weights the gguf package dequantizes."""

    def __init__(self, tensors, groups):
        from ..blocks.reference import dequantize

        super().__init__(groups)
        self.weights = {}
        for g in groups:
            # Expert stacks stay float32 (what the dequantizer gives, exactly), a
            # used expert's matrix goes float64 per product: a float64 copy of
            # every expert would be 2x the memory for what one token never reads.
            dtype = np.float32 if g.n_expert else np.float64
            parts = [dequantize(tensors[n].qtype, tensors[n].shape, tensors[n].data).astype(dtype, copy=False)
                     for n in g.names]
            self.weights[g.names] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-2)

    def multiply(self, group, x, ids=None, tiled=False):
        w, x64 = self.weights[group.names], x.astype(np.float64)
        if ids is None:
            return (x64 @ w.T).astype(np.float32)
        return np.stack([w[e].astype(np.float64) @ xi for xi, row in zip(x64, ids) for e in row]).astype(np.float32)
