"""What the vector ops share: where a run of vectors sits in a tensor
(Vectors), the Q8_1 output some ops write beside their floats
(Q8_1Output), one op's dispatches and launches (_Op), the variant of an op
that reduces over its workgroup, and whether a device spreads ops over
workgroups."""
from __future__ import annotations

from dataclasses import dataclass

import kp
import numpy as np

from ...blocks.formats import CHUNK
from ...device.shader_variants import VectorOpVariant
from ...ops import MAX_GROUPS_X, Launch, q8_1_words

REDUCE_WG = 64  # RMSNorm and Attention without subgroup arithmetic (a shared-memory tree)


def _size(t) -> int:
    """Elements of a tensor's buffer: its n vectors, each padded to its stride."""
    return t.kp.size()


def _f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Vectors:
    """n vectors of `length` values inside a vkq.Tensor: value i of vector v is
    element offset + v * stride + i of its buffer. stride 0: the tensor's own."""

    tensor: object
    length: int
    offset: int = 0
    stride: int = 0

    @property
    def step(self) -> int:
        return self.stride or self.tensor.stride

    def check(self, n: int, what: str) -> None:
        """n vectors fit in the tensor."""
        need = self.offset + (n - 1) * self.step + self.length
        if n < 1 or need > _size(self.tensor):
            raise ValueError(f"{what}: {n} vector(s) of {self.length} at offset {self.offset}, stride {self.step} "
                             f"need {need} elements; the tensor has {_size(self.tensor)}")


@dataclass(frozen=True)
class Q8_1Output:
    """A uint32 tensor to hold the Q8_1 blocks (`planes` int8 planes, vkq.blocks.activations)
    of an op's float output, laid out as vkq.Graph's own quantization lays them."""

    xq: object
    planes: int


def _q8_1_params(out: Vectors, q: Q8_1Output | None, n: int, what: str) -> tuple[object, int, int]:
    """(the tensor bound as xq, X_PLANES, xq's blocks per vector): out's tensor
    and 0s without q. With q, out must be its whole tensor, so that its blocks
    are the tensor's, and q.xq must hold them."""
    if q is None:
        return out.tensor, 0, 0
    t = out.tensor
    if q.planes not in (1, 2):
        raise ValueError(f"{what}: Q8_1 output of {q.planes} planes; 1 or 2")
    if out.offset or out.length != t.length or out.step != t.stride or n != t.n:
        raise ValueError(f"{what}: a Q8_1 output needs the float output to be its whole tensor {t!r}")
    if q.xq.dtype != np.uint32 or _size(q.xq) < q8_1_words(n, t.stride, q.planes):
        raise ValueError(f"{what}: the Q8_1 tensor must be uint32 with {q8_1_words(n, t.stride, q.planes)} "
                         f"words, got {q.xq!r}")
    return q.xq, q.planes, t.stride // CHUNK


class _Op:
    """One dispatch (or one per weights buffer), recorded as many times as asked."""

    reads: tuple
    writes: tuple
    # (float tensor, its Q8_1 tensor, planes) when the op writes both (Q8_1Output)
    quantized: tuple | None = None

    def __init__(self, device):
        self.device = device
        self.algorithms: list = []
        self.launches: list[Launch] = []  # one per algorithm

    def _dispatch(self, tensors, variant, groups, spec, push, depth: int, binding_kinds=None) -> None:
        """An algorithm of `groups` workgroups of spec[0] invocations, and its
        Launch; binding_kinds as Device.algorithm's (default: storage buffers)."""
        self.algorithms.append(self.device.algorithm(tensors, variant, groups, spec, push, binding_kinds))
        self.launches.append(Launch(tuple(groups), spec[0], depth))

    def record(self, seq) -> None:
        for i, algo in enumerate(self.algorithms):
            if i:
                # Dispatches of one op write disjoint parts of its output (the
                # barrier keeps the validation layer's whole-buffer tracking
                # clean), or the second reads what the first wrote (Attention's splits).
                seq.record(self.device.compute_barrier())
            seq.record(kp.OpAlgoDispatch(algo))


def reducing_variant(device, op: str) -> tuple[VectorOpVariant, int]:
    """The variant and workgroup size of an op that reduces over its workgroup:
    one subgroup per workgroup where subgroup arithmetic exists (the reduction
    then needs no barrier: on lavapipe a barrier costs more than the sums),
    else REDUCE_WG invocations and a shared-memory tree."""
    caps = device.caps
    size = caps.subgroup_size
    if caps.subgroup_arithmetic and size >= 1 and size & (size - 1) == 0 \
            and size <= caps.max_workgroup_invocations:
        return VectorOpVariant(op, True), size
    return VectorOpVariant(op, False), REDUCE_WG


def _groups(n: int, per_group: int) -> int:
    g = -(-n // per_group)
    if g > MAX_GROUPS_X:
        raise ValueError(f"{n} items need {g} workgroups; at most {MAX_GROUPS_X}")
    return g



def spreads(device) -> bool:
    """Whether the ops that one workgroup could do (norms, argmax, attention)
    spread over workgroups on this device: on a GPU, where one workgroup
    leaves all but one of its cores idle; not on a CPU driver, whose few
    cores the other vectors and ops keep busy."""
    return device.caps.device_type != "cpu"
