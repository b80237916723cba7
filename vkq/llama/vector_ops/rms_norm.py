"""RMSNorm: with its weight; optionally adds a residual first (x += r,
kept), the way a llama layer's residual adds run, fused into the norm after
them, and that residual may be the weighted sum of a mixture of experts'
slots (WeightedSlots)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...blocks.formats import CHUNK
from ...device.shader_variants import VectorOpVariant
from ..config import MAX_EXPERTS_USED
from .common import Q8_1Output, Vectors, _ceil, _f32_bits, _groups, _Op, _q8_1_params, _size, reducing_variant, spreads

# RMSNorm's invocations per workgroup on a GPU: 8 values each of a
# 4096-value vector's sum of squares (ggml's width), and a workgroup per
# slice of RMS_NORM_GPU_WG values (rms_norm_workgroups).
RMS_NORM_GPU_WG = 512


@dataclass(frozen=True)
class WeightedSlots:
    """A residual that is, for each vector v, the weighted sum of k vectors:
    a mixture-of-experts layer's selected experts' outputs (MUL_MAT_ID's slots
    v*k .. v*k + k - 1 of the residual's tensor) and the router's weights
    (weights[offset + v*k + j])."""

    weights: object
    k: int
    offset: int = 0


def rms_norm_launch(device, spread: bool = True) -> tuple[VectorOpVariant, int]:
    """The variant and invocations per workgroup of RMSNorm (its workgroups
    per vector: rms_norm_workgroups): where the device spreads (and
    `spread`), RMS_NORM_GPU_WG (at most the device's workgroup; an H200 ran SmolLM2's and an 8B model's RMSNorm
    at 17 and 97 us a vector with one workgroup of 32, 33% and 60% of their
    decode steps, 2026-11-26: 36 dependent loads of a 4096-value vector),
    else reducing_variant's (one subgroup: a CPU driver's cores are busy
    with the other vectors). Either is one order of the sums for every
    vector, so a chunk's and one token's norms are the same bits."""
    variant, wg = reducing_variant(device, "rms_norm")
    if not (spread and spreads(device)):
        return variant, wg
    wide = RMS_NORM_GPU_WG
    while wide > device.caps.max_workgroup_invocations:
        wide //= 2
    return variant, max(wg, wide)


def rms_norm_workgroups(device, length: int, spread: bool = True) -> int:
    """Workgroups per vector of RMSNorm where one workgroup does not write x
    back in place: where the device spreads (and `spread`), one per slice of
    as many values as rms_norm_launch's invocations (whole 32-value blocks:
    16 of them in a workgroup of 512), so that a vector of 4096 values
    launches 8 x 512 = 4096 invocations (an H100's 132 SMs want a few
    thousand), each workgroup summing the whole vector itself (its L2 holds
    it: shaders/rms_norm.comp) and scaling its slice; else one."""
    if not (spread and spreads(device)):
        return 1
    wg = rms_norm_launch(device, spread)[1]
    return _ceil(_ceil(length, CHUNK), max(1, wg // CHUNK))


def rms_norm_depth(length: int, wg: int, workgroups: int = 1) -> int:
    """Serial depth (Launch) of shaders/rms_norm.comp over vectors of
    `length` spread over `workgroups` of wg invocations: its sum of squares'
    loop, a vec4 every 4 * wg values (the residual slots, a specialization
    constant, unrolled), then its loop over its slice's 32-value blocks, a
    block an invocation (a block's 8 vec4s unrolled; a slice is the
    vector's blocks over the workgroups, rounded up)."""
    return _ceil(length, 4 * wg) + _ceil(_ceil(length, CHUNK), workgroups * wg)


class RMSNorm(_Op):
    """y = x / sqrt(mean(x^2) + eps) * w for n vectors; with `residual`,
    x + residual first, written to x_out (default x itself); with `slots`,
    the residual is the weighted sum of each vector's slots (WeightedSlots);
    with `xq`, y's Q8_1 blocks too. Each vector is spread over `workgroups`
    of rms_norm_launch's invocations (default rms_norm_workgroups, `spread`
    as theirs; one where x is written back in place, which only one
    workgroup per vector may do: another may still be summing what it
    overwrites), each summing the whole vector, then taking its slice of
    blocks; the sums, and so the results, are the same bits however many
    workgroups there are."""

    def __init__(self, device, x: Vectors, w, y: Vectors, eps: float, n: int = 1,
                 residual: Vectors | None = None, xq: Q8_1Output | None = None, slots: WeightedSlots | None = None,
                 x_out: Vectors | None = None, workgroups: int | None = None, spread: bool = True):
        super().__init__(device)
        length = x.length
        if slots is not None and residual is None:
            raise ValueError("RMSNorm: weighted slots are a residual's: give the residual's vectors")
        if x_out is not None and residual is None:
            raise ValueError("RMSNorm: x_out holds x + residual: give the residual")
        checks = [(x, "RMSNorm x"), (y, "RMSNorm y")] + ([(residual, "RMSNorm residual")] if residual else []) + (
            [(x_out, "RMSNorm x_out")] if x_out else [])
        for vec, what in checks:
            if vec.length != length:
                raise ValueError(f"{what}: {vec.length} values per vector, x has {length}")
            vec.check(n * (slots.k if slots is not None and vec is residual else 1), what)
        if _size(w) < length:
            raise ValueError(f"RMSNorm weight: {_size(w)} values for vectors of {length}")
        if slots is not None and (not 1 <= slots.k <= MAX_EXPERTS_USED or slots.weights.dtype != np.float32
                                  or _size(slots.weights) < slots.offset + n * slots.k):
            raise ValueError(f"RMSNorm slots: 1 to {MAX_EXPERTS_USED} per vector and {n * slots.k} float32 "
                             f"weights from {slots.offset}, got k={slots.k}, {slots.weights!r}")
        r = residual or x
        xo = x_out or x
        in_place = residual is not None and x_out is None
        xq_t, planes, xq_stride = _q8_1_params(y, xq, n, "RMSNorm")
        rw = slots.weights if slots is not None else x.tensor
        self.reads = (x.tensor, w) + ((residual.tensor,) if residual else ()) + ((rw,) if slots else ())
        self.writes = (y.tensor,) + ((xo.tensor,) if residual else ()) + ((xq_t,) if xq else ())
        self.quantized = (y.tensor, xq_t, planes) if xq else None
        push = [length, x.offset, x.step, r.offset, r.step, y.offset, y.step, _f32_bits(eps), xq_stride,
                slots.offset if slots else 0, xo.offset, xo.step]
        variant, wg = rms_norm_launch(device, spread)
        n_blocks = -(-length // CHUNK)
        if workgroups is None:
            workgroups = 1 if in_place else rms_norm_workgroups(device, length, spread)
        if not isinstance(workgroups, int) or not 1 <= workgroups <= max(1, n_blocks) or (in_place and workgroups > 1):
            raise ValueError(f"RMSNorm: {workgroups!r} workgroups per vector; 1 to its {n_blocks} blocks, and 1 "
                             "where x is written back in place")
        self.workgroups = workgroups
        self._dispatch([x.tensor.kp, r.tensor.kp, w.kp, y.tensor.kp, xq_t.kp, rw.kp, xo.tensor.kp], variant,
                       (_groups(self.workgroups, 1), n, 1),
                       [wg, int(residual is not None), planes, slots.k if slots else 0], push,
                       rms_norm_depth(length, wg, workgroups))
