"""SoftCap: x = c * tanh(x / c) in place over n vectors (Gemma 2's final
logits, before the argmax reads them), finite for any x but NaN
(shaders/soft_cap.glsl)."""
from __future__ import annotations

from ...device.shader_variants import VectorOpVariant
from .common import Vectors, _f32_bits, _groups, _Op

SOFT_CAP_WG = 64  # invocations (values) per workgroup


def soft_cap_depth() -> int:
    """Serial depth (Launch) of shaders/soft_cap.comp: one value per invocation."""
    return 1


class SoftCap(_Op):
    """x = cap * tanh(x / cap) for n vectors of x, in place; cap > 0."""

    def __init__(self, device, x: Vectors, cap: float, n: int = 1):
        super().__init__(device)
        if not cap > 0:
            raise ValueError(f"SoftCap: cap {cap!r}; a positive number")
        x.check(n, "SoftCap x")
        self.reads, self.writes = (x.tensor,), (x.tensor,)
        push = [x.length, x.offset, x.step, _f32_bits(cap)]
        self._dispatch([x.tensor.kp], VectorOpVariant("soft_cap"), (_groups(x.length, SOFT_CAP_WG), n, 1),
                       [SOFT_CAP_WG], push, soft_cap_depth())
