"""Argmax: greedy sampling, numpy's argmax order, over parts of the
vector where the device spreads."""
from __future__ import annotations

import numpy as np

from ...device.shader_variants import VectorOpVariant
from ...ops import MAX_GROUPS_X
from .common import Vectors, _ceil, _Op, _size, spreads

ARGMAX_WG = 64
# Values per workgroup of a GPU's argmax, 4 per invocation: a 49k
# vocabulary in 192 workgroups (an H100 has 132 SMs), a 128k one's 501
# parts picked from in 8 loads per invocation.
ARGMAX_SPAN = 256


def argmax_parts(device, length: int) -> int:
    """Ranges a vector's argmax is split into: one per ARGMAX_SPAN values
    where the device spreads (one workgroup over a 49k vocabulary took an
    H200 235 us, 2026-11-26: 768 dependent loads per invocation), else the
    whole vector in one."""
    return -(-length // ARGMAX_SPAN) if spreads(device) else 1


def argmax_depth(length: int, parts: int, wg: int, pass_: int) -> int:
    """Serial depth (Launch) of shaders/argmax.comp's PASS: its loop over a
    vector (0), over one of its `parts` ranges (1), or over the parts (2)."""
    return _ceil(_ceil(length, parts) if pass_ == 1 else parts if pass_ == 2 else length, wg)


class Argmax(_Op):
    """out[v] = argmax of vector v (int32), for n vectors: numpy's choice
    (the first of equal values; the first NaN if any). `parts`: ranges each
    vector is split into over as many workgroups, then a second dispatch
    picks the best of them (default argmax_parts; shaders/argmax.comp);
    with `fold`, the last of a vector's workgroups picks it instead, in one
    dispatch (the same index)."""

    def __init__(self, device, x: Vectors, out, n: int = 1, parts: int | None = None, fold: bool = False):
        super().__init__(device)
        x.check(n, "Argmax x")
        if _size(out) < n:
            raise ValueError(f"Argmax: {n} results, the output tensor holds {_size(out)}")
        if parts is None:
            parts = argmax_parts(device, x.length)
        if not isinstance(parts, int) or not 1 <= parts <= min(x.length, MAX_GROUPS_X):
            raise ValueError(f"Argmax: {parts!r} parts; 1 to {min(x.length, MAX_GROUPS_X)}")
        self.parts = parts
        self.folded = fold and parts > 1
        self.reads, self.writes = (x.tensor,), (out,)
        push = [x.length, x.offset, x.step, parts]
        # (value bits, index) per part and vector, then the fold's counter per vector: only this op's,
        # uploaded as zeros (the counters' start; no graph uploads a tensor it is not given)
        scratch = device.upload(np.zeros(2 * n * parts + n, np.uint32))
        tensors = [x.tensor.kp, out.kp, scratch]
        variant, length = VectorOpVariant("argmax"), x.length
        depth = [argmax_depth(length, parts, ARGMAX_WG, pass_) for pass_ in (0, 1, 2)]
        if parts == 1:
            self._dispatch(tensors, variant, (n, 1, 1), [ARGMAX_WG, 0, 0], push, depth[0])
        elif self.folded:  # (its last workgroup's part, then the pick)
            self._dispatch(tensors, variant, (parts, n, 1), [ARGMAX_WG, 1, 1], push, depth[1] + depth[2])
        else:  # (_Op.record puts a barrier between the two)
            self._dispatch(tensors, variant, (parts, n, 1), [ARGMAX_WG, 1, 0], push, depth[1])
            self._dispatch(tensors, variant, (n, 1, 1), [ARGMAX_WG, 2, 0], push, depth[2])
