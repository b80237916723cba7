"""ExpertBias: a mixture of experts' biases added to a MUL_MAT_ID's output in
place, each slot its expert's row (gpt-oss's gate, up and down biases)."""
from __future__ import annotations

import numpy as np

from ...device.shader_variants import VectorOpVariant
from .common import Vectors, _groups, _Op, _size

EXPERT_BIAS_WG = 64  # invocations (values) per workgroup


def expert_bias_depth() -> int:
    """Serial depth (Launch) of shaders/expert_bias.comp: one value per invocation."""
    return 1


class ExpertBias(_Op):
    """x[s] += bias[ids[s]] for the n_slots vectors of x (a MUL_MAT_ID's
    slots), bias a float32 tensor of n_expert rows of x.length values, ids
    the int32 ids of the slots (ExpertRouting's, in range)."""

    def __init__(self, device, x: Vectors, bias, ids, n_slots: int, n_expert: int):
        super().__init__(device)
        x.check(n_slots, "ExpertBias x")
        if bias.dtype != np.float32 or _size(bias) < n_expert * x.length:
            raise ValueError(f"ExpertBias: a float32 bias of {n_expert} rows of {x.length}, got {bias!r}")
        if ids.dtype != np.int32 or _size(ids) < n_slots:
            raise ValueError(f"ExpertBias: {n_slots} int32 ids, got {ids!r}")
        self.reads, self.writes = (x.tensor, bias, ids), (x.tensor,)
        push = [x.length, x.offset, x.step, n_expert]
        self._dispatch([x.tensor.kp, bias.kp, ids.kp], VectorOpVariant("expert_bias"),
                       (_groups(x.length, EXPERT_BIAS_WG), n_slots, 1), [EXPERT_BIAS_WG], push, expert_bias_depth())
