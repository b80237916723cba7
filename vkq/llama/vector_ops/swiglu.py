"""SwiGLU: silu(gate) * up, elementwise; or GeGLU, gelu(gate) * up, or
gpt-oss's clamped SwiGLU (`glu`)."""
from __future__ import annotations

from ...blocks.formats import CHUNK
from ...device.shader_variants import VectorOpVariant
from .common import Q8_1Output, Vectors, _groups, _Op, _q8_1_params

# Workgroup size (a power of two: the reductions are trees). Small: every op
# here moves a few KB per token; what matters is not leaving lanes idle.
GLUS = ("silu", "gelu", "oai")
SWIGLU_WG = 64  # invocations (32-value blocks) per workgroup


def swiglu_depth() -> int:
    """Serial depth (Launch) of shaders/swiglu.comp: a 32-value block per
    invocation, its 8 vec4s unrolled."""
    return 1


class SwiGLU(_Op):
    """out = silu(gate) * up for n vectors (glu "gelu": GeGLU's gelu(gate) *
    up, ggml's tanh approximation; "oai": gpt-oss's min(g, 7) sigmoid(1.702
    min(g, 7)) (clamp(u, -7, 7) + 1)); with `xq`, out's Q8_1 blocks too."""

    def __init__(self, device, gate: Vectors, up: Vectors, out: Vectors, n: int = 1,
                 xq: Q8_1Output | None = None, glu: str = "silu"):
        super().__init__(device)
        if glu not in GLUS:
            raise ValueError(f"SwiGLU: glu {glu!r}; one of {', '.join(GLUS)}")
        for vec, what in ((gate, "SwiGLU gate"), (up, "SwiGLU up"), (out, "SwiGLU out")):
            if vec.length != gate.length:
                raise ValueError(f"{what}: {vec.length} values per vector, gate has {gate.length}")
            vec.check(n, what)
        xq_t, planes, xq_stride = _q8_1_params(out, xq, n, "SwiGLU")
        self.reads = (gate.tensor, up.tensor)
        self.writes = (out.tensor,) + ((xq_t,) if xq else ())
        self.quantized = (out.tensor, xq_t, planes) if xq else None
        push = [gate.length, gate.offset, gate.step, up.offset, up.step, out.offset, out.step, xq_stride]
        self._dispatch([gate.tensor.kp, up.tensor.kp, out.tensor.kp, xq_t.kp], VectorOpVariant("swiglu", glu=glu),
                       (_groups(-(-gate.length // CHUNK), SWIGLU_WG), n, 1), [SWIGLU_WG, planes], push,
                       swiglu_depth())
