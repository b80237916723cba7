"""HeadNorm: a bias added to a mat-vec's output and/or an RMSNorm of each
of its heads, in place (Qwen2's Q/K/V biases, Qwen3's Q/K norms)."""
from __future__ import annotations

from .common import Vectors, _ceil, _f32_bits, _groups, _Op, _size, reducing_variant

def head_norm_depth(head_dim: int, wg: int, norm: bool) -> int:
    """Serial depth (Launch) of shaders/head_norm.comp: its loop over the
    head's values, and with the norm a second one."""
    return _ceil(head_dim, wg) * (2 if norm else 1)


class HeadNorm(_Op):
    """For n vectors of x, each of heads * head_dim values, in place: x +=
    bias (bias: a tensor of x.length values), then with `weight` (head_dim
    values) an RMSNorm of each head: x_h = x_h / sqrt(mean(x_h^2) + eps) *
    weight. One workgroup per head and vector. The bias alone is
    elementwise (each invocation adds its own values; no reduction): any
    divisor of the vector's length may stand for head_dim, the same bits,
    and a head's width spreads a stacked Q/K/V over workgroups (Qwen2.5-0.5B's
    1,152 values as one "head" were one workgroup of 32 at depth 36; heads
    of 64, 18 workgroups at depth 2)."""

    def __init__(self, device, x: Vectors, head_dim: int, n: int = 1, *, bias=None, weight=None,
                 eps: float = 0.0):
        super().__init__(device)
        if bias is None and weight is None:
            raise ValueError("HeadNorm: a bias, a weight or both")
        if not 1 <= head_dim <= x.length or x.length % head_dim:
            raise ValueError(f"HeadNorm: heads of {head_dim} values do not split vectors of {x.length}")
        x.check(n, "HeadNorm x")
        if bias is not None and _size(bias) < x.length:
            raise ValueError(f"HeadNorm bias: {_size(bias)} values for vectors of {x.length}")
        if weight is not None and _size(weight) < head_dim:
            raise ValueError(f"HeadNorm weight: {_size(weight)} values for heads of {head_dim}")
        self.reads = (x.tensor,) + tuple(t for t in (bias, weight) if t is not None)
        self.writes = (x.tensor,)
        variant, wg = reducing_variant(device, "head_norm")
        push = [x.offset, x.step, head_dim, _f32_bits(eps)]
        # (an unused binding takes x's buffer: the shader reads it only under its constant)
        tensors = [x.tensor.kp, (x.tensor if bias is None else bias).kp, (x.tensor if weight is None else weight).kp]
        self._dispatch(tensors, variant, (_groups(x.length // head_dim, 1), n, 1),
                       [wg, int(bias is not None), int(weight is not None)], push,
                       head_norm_depth(head_dim, wg, weight is not None))
