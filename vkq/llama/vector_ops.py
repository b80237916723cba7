"""The vector ops of a llama decode step on the device: one compute shader each.

Each op binds the vkq.Tensor objects it is given once, at construction,
and `record(seq)` appends its dispatch to a Kompute sequence; `reads` and
`writes` name the tensors it touches, so that a vkq.Graph (`g.add(op)`) puts
barriers only where one op reads what another wrote. `Vectors` says where a
run of vectors sits inside a tensor (an offset, for one part of a stacked
mat-vec's output, and a stride).

- EmbedRows: rows of a quantized matrix (the token embedding) by id, decoded
  by the mat-vec's own block decoders from the same device layout.
- RMSNorm: with weight; optionally adds a residual first (x += r, kept), the
  way a llama layer's residual adds run: fused into the norm after them.
- Attention: RoPE of the new query and key, the new key and value appended
  to the float32 KV cache at the position in a device int32 tensor, and
  grouped-query attention over the cache, causal: one dispatch per layer.
- SwiGLU: silu(gate) * up.
- HeadNorm: a bias added to a mat-vec's output and/or an RMSNorm of each of
  its heads, in place (Qwen2's Q/K/V biases, Qwen3's Q/K norms).
- ExpertRouting: a mixture-of-experts router's top-k (on the logits) and
  softmax weights
  (the weighted sum of the selected experts' outputs is the residual of the
  RMSNorm after them: WeightedSlots).
- Argmax: greedy sampling, numpy's argmax order.

The vector ops take n vectors (a decode step's one, or a chunk of a
prompt's tokens).

RMSNorm, SwiGLU and Attention can also write their output as the int8
mat-vec path's Q8_1 blocks (`xq`, a Q8_1Output): the mat-vecs that read it
next then need no quantize dispatch of their own (vkq.Graph takes the op's
`quantized` in place of one), which on a GPU saves a dispatch and a barrier
per mat-vec stage.

Every op keeps its dispatches' `launches` (Launch: workgroups, invocations,
and serial depth, counted from the shader's loops by a function beside the
op), which `vkq generate --shape` prints per op; recorded on LaunchesOf(device,
a GPU class's caps), the ops take that class's launches on any device.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import kp
import numpy as np

from ..blocks.formats import CHUNK
from ..device.shader_variants import GetRowsVariant, VectorOpVariant
from ..dispatch import gpu_classes
from ..dispatch.classify import DeviceClass
from ..ops import MAX_GROUPS_X, Launch, q8_1_words, weights_push
from .config import MAX_EXPERTS, MAX_EXPERTS_USED

# Workgroup sizes (powers of two: the reductions are trees). Small: every op
# here moves a few KB per token; what matters is not leaving lanes idle.
ROWS_WG = 64  # EmbedRows: invocations (32-value chunks) per workgroup
SWIGLU_WG = 64  # invocations (32-value blocks) per workgroup
ARGMAX_WG = 64
# Values per workgroup of a GPU's argmax, 4 per invocation: a 49k
# vocabulary in 192 workgroups (an H100 has 132 SMs), a 128k one's 501
# parts picked from in 8 loads per invocation.
ARGMAX_SPAN = 256
REDUCE_WG = 64  # RMSNorm and Attention without subgroup arithmetic (a shared-memory tree)
# RMSNorm's invocations per workgroup on a GPU: 8 values each of a
# 4096-value vector's sum of squares (ggml's width), and a workgroup per
# slice of RMS_NORM_GPU_WG values (rms_norm_workgroups).
RMS_NORM_GPU_WG = 512
# Positions of a KV cache: pos is a uint in the shaders; more than anyone's context.
MAX_KV_CAPACITY = 1 << 20


def _size(t) -> int:
    """Elements of a tensor's buffer: its n vectors, each padded to its stride."""
    return t.kp.size()


def _f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class LaunchesOf:
    """A device whose vector ops launch as they would on a device of other
    caps (`caps`: a GPU class's, GPU_LAUNCH_CAPS), everything else the
    device's own: how a CPU driver records, runs and measures a GPU's
    launches. Subgroup arithmetic only where the device has it too (its
    shaders run here), and no loop budget (a GPU has none; the launches
    taken here stay far within lavapipe's)."""

    def __init__(self, device, caps):
        self.device = device
        self.caps = replace(device.caps, device_type=caps.device_type, subgroup_size=caps.subgroup_size,
                            subgroup_arithmetic=caps.subgroup_arithmetic and device.caps.subgroup_arithmetic,
                            max_workgroup_invocations=min(caps.max_workgroup_invocations,
                                                          device.caps.max_workgroup_invocations),
                            max_loop_iterations=None, compute_units=caps.compute_units)

    def __getattr__(self, name):
        return getattr(self.device, name)


@dataclass(frozen=True)
class LaunchCaps:
    """What the vector ops' launches depend on (vkq.device.caps.DeviceCaps's
    fields of the same names), and the vendor table's class the class's
    mat-vecs are chosen from (vkq.llama.profile.MatvecView)."""

    device_type: str
    subgroup_size: int
    subgroup_arithmetic: bool
    max_workgroup_invocations: int
    compute_units: int | None
    table_class: DeviceClass


# GPU classes whose launches a step can be recorded with on any device
# (LaunchesOf; `vkq generate --shape nvidia`): their facts
# (vkq.dispatch.gpu_classes: the wave, the workgroup limit, and for the
# compute units a proxy of the class, an H100's 132 SMs, which only sizes
# the attention's splits, attention_split), and for the table an H100's
# class (Turing or newer).
_NVIDIA = gpu_classes.CLASSES["nvidia/turing+"]
GPU_LAUNCH_CAPS = {
    "nvidia": LaunchCaps("discrete", _NVIDIA.wave, True, _NVIDIA.max_workgroup_invocations, _NVIDIA.compute_units,
                         DeviceClass("nvidia", "turing+", "proprietary", ("vkq.llama: an H100's class",))),
}


def launches_of(device, gpu_class: str | None):
    """The device, or (gpu_class, a key of GPU_LAUNCH_CAPS) one that launches as that class does."""
    if gpu_class is None:
        return device
    if gpu_class not in GPU_LAUNCH_CAPS:
        raise ValueError(f"launches of {gpu_class!r}: one of {', '.join(sorted(GPU_LAUNCH_CAPS))}")
    return LaunchesOf(device, GPU_LAUNCH_CAPS[gpu_class])


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


def embed_rows_depth() -> int:
    """Serial depth (Launch) of shaders/get_rows.comp: one 32-value chunk per
    invocation, decoded by its block type's fixed loops, written as 8 vec4s."""
    return 1


class EmbedRows(_Op):
    """out[v] = W[ids[v]] as floats, for v < n: W a matrix uploaded with
    Backend.upload (any block type vkq supports). The host range-checks ids."""

    def __init__(self, device, weights, ids, out: Vectors, n: int = 1):
        super().__init__(device)
        lay = weights.layout
        if weights.is_expert_stack:
            raise ValueError(f"EmbedRows takes a matrix, got weights of shape {weights.shape}")
        if out.length != lay.k or out.step % 4 or out.offset:
            raise ValueError(f"EmbedRows: output vectors of {lay.k} values from element 0, a stride that is a "
                             f"multiple of 4 (got length {out.length}, offset {out.offset}, stride {out.step})")
        # The padding of a plain type's row (to 32 values) is written too: it is zero.
        Vectors(out.tensor, lay.k_padded, out.offset, out.step).check(n, "EmbedRows output")
        if _size(ids) < n:
            raise ValueError(f"EmbedRows: {n} ids, the ids tensor holds {_size(ids)}")
        self.reads, self.writes = (ids,), (out.tensor,)  # (the weights are never written)
        self.n_rows = lay.rows
        variant = GetRowsVariant(lay.fmt.name)
        selects = weights.backend.pipeline(weights, 1, "dmmv").value_lookup == "selects"  # as its mat-vec decodes
        nchunks = lay.k_padded // CHUNK
        for buf in weights.buffers:
            # get_rows.comp reads x_col_stride as the output's stride.
            push = weights_push(buf, lay.nblocks, x_col_stride=out.step, x_slot_stride=0, y_col_stride=0,
                                y_slot_stride=0)
            self._dispatch([buf.tensor, ids.kp, out.tensor.kp], variant, (_groups(nchunks, ROWS_WG), n, 1),
                           [ROWS_WG, int(selects)], push, embed_rows_depth())


@dataclass(frozen=True)
class WeightedSlots:
    """A residual that is, for each vector v, the weighted sum of k vectors:
    a mixture-of-experts layer's selected experts' outputs (MUL_MAT_ID's slots
    v*k .. v*k + k - 1 of the residual's tensor) and the router's weights
    (weights[offset + v*k + j])."""

    weights: object
    k: int
    offset: int = 0


def spreads(device) -> bool:
    """Whether the ops that one workgroup could do (norms, argmax, attention)
    spread over workgroups on this device: on a GPU, where one workgroup
    leaves all but one of its cores idle; not on a CPU driver, whose few
    cores the other vectors and ops keep busy."""
    return device.caps.device_type != "cpu"


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


@dataclass(frozen=True)
class AttentionShape:
    """The attention geometry of a layer."""

    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    capacity: int  # positions the KV cache holds
    neox: bool = False  # RoPE's pairs (x[i], x[i + n_rot/2]) (ggml's neox mode), else (x[2i], x[2i+1])

    def __post_init__(self):
        if min(self.n_head, self.n_head_kv, self.head_dim, self.capacity) < 1:
            raise ValueError(f"attention sizes must be positive: {self}")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"{self.n_head} attention heads do not split into {self.n_head_kv} KV groups")
        if self.n_rot % 2 or not 0 <= self.n_rot <= self.head_dim:
            raise ValueError(f"RoPE dimensions {self.n_rot}: must be even and at most head_dim {self.head_dim}")
        if self.capacity > MAX_KV_CAPACITY:
            raise ValueError(f"a KV cache of {self.capacity} positions: at most {MAX_KV_CAPACITY}")

    @property
    def cache_size(self) -> int:
        """Elements of one layer's K (or V) cache: (n_head_kv, capacity, head_dim)."""
        return self.n_head_kv * self.capacity * self.head_dim


def rope_table(inv_freq: np.ndarray, capacity: int, mscale: float = 1.0) -> np.ndarray:
    """(capacity, n_rot/2, 2) float32 (cos, sin) of pos * inv_freq[i], times
    mscale (the config's rope_attn_factor), computed in float64 and rounded
    once, as the numpy reference computes them."""
    ang = np.arange(capacity, dtype=np.float64)[:, None] * np.asarray(inv_freq, np.float64)[None, :]
    return (np.stack([np.cos(ang), np.sin(ang)], axis=-1) * mscale).astype(np.float32)


MAX_HEAD_DIM = 256  # shaders/attention.comp keeps a head's q and new key in shared memory
# At most this many query heads of one K/V head in one workgroup of
# shaders/attention.comp: each key and value it loads serves them all.
MAX_ATTENTION_HEADS = 8


def attention_heads(shape: "AttentionShape") -> int:
    """Query heads per workgroup of shaders/attention.comp (its HEADS): the
    largest divisor of a K/V head's n_head / n_head_kv query heads up to
    MAX_ATTENTION_HEADS, so that every workgroup has as many."""
    group = shape.n_head // shape.n_head_kv
    return max(d for d in range(1, min(group, MAX_ATTENTION_HEADS) + 1) if group % d == 0)


def attention_loop_iterations(head_dim: int, wg: int, positions: int, heads: int = MAX_ATTENTION_HEADS) -> int:
    """An upper bound of the loop iterations one invocation of
    shaders/attention.comp takes over `positions` positions, counting every
    loop as written, each over the workgroup's `heads` query heads: RoPE,
    the scores (head_dim / 4 vec4s each, 4 loads apiece where head_dim is
    not a multiple of 4), the exps, the weighted sum (each of its vec4s over
    every position), the reductions and the Q8_1 store of its blocks."""
    h = heads  # (short: it is in every term)
    per_t = -(-positions // wg)
    vec4s = -(-head_dim // 4)
    dims = -(-vec4s // wg)
    q8_1 = -(-head_dim // 32 // wg) * (8 * 4 + 8 + 2 * 8 * 2)
    return (-(-head_dim // 2 // wg) * (h + 1) + per_t * (vec4s * (4 + h) + 3 * h + 2)
            + dims * ((positions + 1) * (4 + h) + 4 * h) + h * (4 * 11 + q8_1))


@dataclass(frozen=True)
class AttentionLaunch:
    """How shaders/attention.comp's dispatches spread their loops (its
    KEY_LANES and VALUE_ROWS, per workgroup of `wg`; the COMBINE pass's
    rows per workgroup of `combine_wg`): 1s, a CPU driver's launch and a
    head's whole context (one invocation scores a position, one sums a
    vec4 over every position)."""

    wg: int
    key_lanes: int = 1
    value_rows: int = 1
    combine_wg: int = 0  # 0: wg
    combine_rows: int = 1


def attention_depth(shape: AttentionShape, wg: int, split: int, heads: int, q8_1: bool = False,
                    combine: bool = False, append: bool = False, key_lanes: int = 1, value_rows: int = 1) -> int:
    """Serial depth (Launch) of a dispatch of shaders/attention.comp of wg
    invocations at a full cache (shape.capacity positions), `split`
    positions per workgroup (0: all, P below): the RoPE loop over a head's
    pairs; the scores' loop over the positions, wg / key_lanes at a time,
    each over head_dim / 4 / key_lanes key vec4s; the exps' loop over the
    positions; the weighted sum's loop over vec4s of the head, wg /
    value_rows at a time, each over the positions of its row (P /
    value_rows), then the query's own value; the Q8_1 store's loop over
    blocks, once per head (barriers between). combine: the second dispatch
    of a split: its loops over the splits for the maximum and the
    denominator (wg at a time), then over the head's vec4s, wg / value_rows
    at a time, each over the splits of its row. append: a chunk's first
    pass (the RoPE loop). The workgroup's `heads` query heads (a
    specialization constant) are unrolled, and the shared-memory trees
    load nothing global."""
    hd, vec4s = shape.head_dim, _ceil(shape.head_dim, 4)
    store = _ceil(hd // CHUNK, wg) if q8_1 else 0
    cols = wg // value_rows
    if append:
        return _ceil(_ceil(hd, 2), wg)
    if combine:
        used = _ceil(shape.capacity, split)
        return 2 * _ceil(used, wg) + _ceil(vec4s, cols) * _ceil(used, value_rows) + store
    positions = split or shape.capacity
    return (_ceil(_ceil(hd, 2), wg) + _ceil(positions, wg // key_lanes) * _ceil(vec4s, key_lanes)
            + _ceil(positions, wg) + _ceil(vec4s, cols) * (_ceil(positions, value_rows) + 1)
            + (0 if split else heads * store))


# A GPU's attention, one query: each head's positions split over about this
# many workgroups per compute unit (an SM), in all, as ggml's Vulkan backend
# sizes its split attention; each split's loops then spread over the
# workgroup (attention_launch). One workgroup per head took an H200 24 us
# per SmolLM2 layer at ~70 positions, 23% of the decode step (2026-11-26);
# splits of 32 positions, one score per invocation, took 51-68 dependent
# loads per invocation (its weighted sum 33), and their combine 4-6 per
# split (513-769 at 4,096 positions). Neither split is measured on a GPU yet.
ATTENTION_WORKGROUPS_PER_UNIT = 2
# Compute units of a GPU that reports none (vkq.device.caps): an H100's 132 SMs.
GPU_COMPUTE_UNITS = 132
# At least this many positions per split (its RoPE of the queries, its
# partial result and the combine's share are per split).
MIN_ATTENTION_SPLIT = 8
# The serial depth each of a GPU's attention dispatches is held to, where
# its widest workgroup can (attention_launch): the bound the tests hold every vector op to is 16.
ATTENTION_GPU_DEPTH = 8


def attention_fold_rounds(launch: AttentionLaunch, split: int, heads: int) -> int:
    """Rounds of combines the split dispatch's last workgroup runs where the
    combine is folded into it (shaders/attention.comp: FOLD): its heads'
    combines side by side, as many at once as the combine's workgroups fit
    in its own, each the COMBINE dispatch's launch (so the same bits); 0
    where the combine's workgroup is wider than the split's (the COMBINE
    dispatch's sums cannot be taken in the same order there), or there is
    no split."""
    cw = launch.combine_wg or launch.wg
    if not split or cw > launch.wg:
        return 0
    return _ceil(heads, launch.wg // cw)


def attention_folds(shape: AttentionShape, launch: AttentionLaunch, split: int, heads: int,
                    q8_1: bool = False) -> bool:
    """Whether Attention folds the combine into the split dispatch: where it
    can (attention_fold_rounds) and the folded dispatch's depth (its last
    workgroup's split and rounds of combines) is within the two dispatches'
    together or within twice ATTENTION_GPU_DEPTH: one dispatch and one
    barrier fewer, for few or no more dependent loads (a head group's
    combines in one workgroup can take rounds where the COMBINE dispatch
    takes a workgroup per head)."""
    rounds = attention_fold_rounds(launch, split, heads)
    if not rounds:
        return False
    split_depth, combine_depth = _attention_pass_depths(shape, launch, split, heads, q8_1)
    return split_depth + rounds * combine_depth <= max(split_depth + combine_depth, 2 * ATTENTION_GPU_DEPTH)


def _attention_pass_depths(shape: AttentionShape, launch: AttentionLaunch, split: int, heads: int,
                           q8_1: bool, append: bool = False) -> tuple[int, int]:
    """(depth of the split dispatch, or a chunk's append pass; of the COMBINE dispatch) for this launch."""
    pass_depth = attention_depth(shape, launch.wg, split, heads, q8_1, False, append, launch.key_lanes,
                                 launch.value_rows)
    combine_depth = attention_depth(shape, launch.combine_wg or launch.wg, split, heads, q8_1, True,
                                    value_rows=launch.combine_rows) if split else 0
    return pass_depth, combine_depth


def attention_split(device, shape: AttentionShape, spread: bool = True) -> int:
    """Positions per workgroup for this device (0: a head's whole context in
    one workgroup): under a loop budget (llvmpipe's, vkq.device.caps), the
    most whose invocations stay within half of it; else, where the device
    spreads (`spreads`) unless `spread` is off, the context over
    ATTENTION_WORKGROUPS_PER_UNIT workgroups per compute unit (the device's,
    else GPU_COMPUTE_UNITS), at least MIN_ATTENTION_SPLIT positions; fewer
    where a split's loops would not fit ATTENTION_GPU_DEPTH in the widest
    workgroup (attention_launch), as long as the combine over more splits
    stays shallower (a device of narrow workgroups and few compute units
    balances the two above the target); one workgroup per head where not."""
    budget = device.caps.max_loop_iterations
    if budget is None:
        if not (spread and spreads(device)):
            return 0
        units = getattr(device.caps, "compute_units", None) or GPU_COMPUTE_UNITS
        per_split = shape.n_head // attention_heads(shape)  # workgroups of a split
        splits = _ceil(ATTENTION_WORKGROUPS_PER_UNIT * units, per_split)
        split = max(MIN_ATTENTION_SPLIT, _ceil(shape.capacity, splits))
        widest = _widest_attention_wg(device, shape)
        while split > MIN_ATTENTION_SPLIT:  # smaller splits while the split dispatch is the deeper one
            depth = _best_split_launch(shape, widest, split)[0]
            smaller = max(MIN_ATTENTION_SPLIT, split * 3 // 4)
            if depth <= ATTENTION_GPU_DEPTH or max(_best_split_launch(shape, widest, smaller)[0],
                                                   _best_combine_launch(shape, widest, smaller)[0]) >= depth:
                break
            split = smaller
        return 0 if split >= shape.capacity else split
    _, wg = reducing_variant(device, "attention")
    heads = attention_heads(shape)  # (the most a workgroup takes: fewer loop less)
    if attention_loop_iterations(shape.head_dim, wg, shape.capacity, heads) <= budget // 2:
        return 0
    lo, hi = 1, shape.capacity  # the largest split within budget / 2, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if attention_loop_iterations(shape.head_dim, wg, mid, heads) <= budget // 2:
            lo = mid
        else:
            hi = mid - 1
    return lo


def attention_shared_bytes(wg: int, heads: int) -> int:
    """Shared memory of shaders/attention.comp: the rotated queries and key
    (MAX_HEAD_DIM each), reduce.glsl's floats and the rows' vec4s, per
    invocation."""
    return 16 * (heads + 1) * (MAX_HEAD_DIM // 4) + 4 * wg + 16 * wg


def _widest_attention_wg(device, shape: AttentionShape) -> int:
    """The widest power-of-two workgroup of shaders/attention.comp the device runs."""
    caps = device.caps
    wg = 1
    while 2 * wg <= min(caps.max_workgroup_invocations, caps.max_workgroup_size_x) and \
            attention_shared_bytes(2 * wg, attention_heads(shape)) <= caps.max_shared_memory:
        wg *= 2
    return wg


def _pow2_upto(n: int) -> list[int]:
    return [1 << i for i in range(n.bit_length()) if 1 << i <= n]


def _best_split_launch(shape: AttentionShape, wg: int, split: int) -> tuple[int, int, int]:
    """(depth, key_lanes, value_rows) of the shallowest split dispatch of wg
    invocations (split 0: the whole context's one dispatch; fewer lanes and
    rows where as deep: fewer trees)."""
    return min((attention_depth(shape, wg, split, 1, key_lanes=lanes, value_rows=rows), lanes, rows)
               for lanes in _pow2_upto(min(wg, _ceil(shape.head_dim, 4))) for rows in _pow2_upto(wg))


def _best_combine_launch(shape: AttentionShape, wg: int, split: int) -> tuple[int, int]:
    """(depth, value_rows) of the shallowest combine dispatch of wg invocations (fewer rows where as deep)."""
    return min((attention_depth(shape, wg, split, 1, combine=True, value_rows=rows), rows) for rows in _pow2_upto(wg))


def attention_launch(device, shape: AttentionShape, split: int, spread: bool = True) -> AttentionLaunch:
    """The workgroups of shaders/attention.comp's dispatches for `split`
    positions per workgroup (attention_split's; 0: a head's whole context):
    a CPU driver's (a loop budget, or the device does not spread) and
    `spread` off, one subgroup-wide workgroup (reducing_variant), lanes and
    rows 1; a GPU's, for each dispatch the narrowest power-of-two workgroup
    (from a subgroup up) whose loops, spread over key lanes and value rows,
    take at most ATTENTION_GPU_DEPTH dependent loads per invocation, else
    the shallowest the widest workgroup gets. A GPU's context too short to
    split (attention_split's 0: at most MIN_ATTENTION_SPLIT positions) is
    spread so too, in its one dispatch (combine_wg and combine_rows unused):
    one subgroup walking each position took 20 loads at one position for
    SmolLM2's heads of 64, 37 for an 8B's of 128."""
    _, wg = reducing_variant(device, "attention")
    if device.caps.max_loop_iterations is not None or not (spread and spreads(device)):
        return AttentionLaunch(wg)
    widest = max(wg, _widest_attention_wg(device, shape))
    sizes = [w for w in _pow2_upto(widest) if w >= wg]
    fits = [(w, _best_split_launch(shape, w, split)) for w in sizes]
    w, (_, lanes, rows) = next(((w, b) for w, b in fits if b[0] <= ATTENTION_GPU_DEPTH), fits[-1])
    if split == 0:
        return AttentionLaunch(w, lanes, rows)
    combines = [(w, _best_combine_launch(shape, w, split)) for w in sizes]
    cw, (_, crows) = next(((w, b) for w, b in combines if b[0] <= ATTENTION_GPU_DEPTH), combines[-1])
    return AttentionLaunch(w, lanes, rows, cw, crows)


def attention_scratch_size(device, shape: AttentionShape, split: int | None = None, queries: int = 1) -> int:
    """Floats of an Attention's scratch for `queries` queries at once: per
    query the scores, then (split) the partial results and the fold's
    counters (one per head group; a new tensor's zeros are their start)."""
    split = attention_split(device, shape) if split is None else split
    if not split:
        return queries * shape.n_head * shape.capacity
    # the partial results' records are whole vec4s (shaders/attention.comp: partial), and so the next query's
    records = shape.n_head * _ceil(shape.capacity, split) * (4 + 4 * _ceil(shape.head_dim, 4))
    return queries * (4 * _ceil(shape.n_head * shape.capacity, 4) + records + 4 * _ceil(shape.n_head, 4))


def check_attention_vectors(op: str, shape: AttentionShape, q: Vectors, k: Vectors, v: Vectors, out: Vectors,
                            n: int) -> None:
    """An attention op's q, k, v and out hold n vectors of the lengths its
    shape needs, and its heads are no wider than the shaders take."""
    qd, kvd = shape.n_head * shape.head_dim, shape.n_head_kv * shape.head_dim
    for vec, length, what in ((q, qd, "q"), (k, kvd, "k"), (v, kvd, "v"), (out, qd, "out")):
        if vec.length != length:
            raise ValueError(f"{op} {what}: {vec.length} values; {shape} needs {length}")
        vec.check(n, f"{op} {what}")
    if shape.head_dim > MAX_HEAD_DIM:
        raise ValueError(f"{op}: head_dim {shape.head_dim}; at most {MAX_HEAD_DIM}")


class Attention(_Op):
    """One attention step of a llama layer for each of n query vectors, the
    i-th at position pos[i]: RoPE (ggml's normal mode: adjacent pairs; or
    its neox mode, shape.neox) of q
    and of the new key k, k and v appended to the caches at pos[i], then out
    = softmax(q . K^T / sqrt(head_dim)) V per query head over positions 0 ..
    pos[i]. q, k, v: the new vectors, unrotated (parts of the stacked Q/K/V
    mat-vec's output); table: rope_table(inv_freq, shape.capacity); scores:
    a float32 scratch tensor of attention_scratch_size(device, shape, split,
    n) values. The caller keeps the positions below the capacity and
    consecutive. With `xq`, out's Q8_1 blocks too (head_dim a multiple of 32).
    split: positions per workgroup, then a second dispatch combines them
    (default: attention_split, per device; 0: a head's positions in one
    workgroup); on a GPU each split's loops, or the whole context's,
    spread over its workgroup (attention_launch, kept as `launch`; not with
    `spread` off: one subgroup per workgroup, as on a CPU driver). heads:
    query heads of one K/V head per workgroup (default attention_heads; it
    must divide n_head / n_head_kv). fold: no second dispatch where
    attention_folds says so (kept as `folded`): the split dispatch's last
    workgroup of each head group combines its splits itself, the same bits
    (the scratch's counters must be zeros at the first replay, as a new
    tensor's are; the shader keeps them so).

    One query (a decode step) is one dispatch. n queries (a chunk of a
    prompt) are two: every key and value appended, then every query
    attending over the caches; a query's arithmetic is the decode step's at
    its position (shaders/attention.comp), so a prompt in chunks gives the
    logits of one fed token by token, bit for bit."""

    def __init__(self, device, shape: AttentionShape, q: Vectors, k: Vectors, v: Vectors, k_cache, v_cache,
                 table, pos, scores, out: Vectors, xq: Q8_1Output | None = None, split: int | None = None,
                 n: int = 1, heads: int | None = None, spread: bool = True, fold: bool = False):
        super().__init__(device)
        s = shape
        check_attention_vectors("Attention", s, q, k, v, out, n)
        for cache, what in ((k_cache, "K cache"), (v_cache, "V cache")):
            if _size(cache) < s.cache_size:
                raise ValueError(f"Attention: the {what} holds {_size(cache)} values; {s} needs {s.cache_size}")
        if _size(table) < s.capacity * s.n_rot:
            raise ValueError(f"Attention: the RoPE table holds {_size(table)} values, {s.capacity * s.n_rot} needed")
        if _size(pos) < n:
            raise ValueError(f"Attention: {n} queries, the positions tensor holds {_size(pos)}")
        split = attention_split(device, s, spread) if split is None else split
        if not isinstance(split, int) or not 0 <= split <= s.capacity:
            raise ValueError(f"Attention: split {split!r}; 0 to the capacity {s.capacity} positions per workgroup")
        need = attention_scratch_size(device, s, split, n)
        if _size(scores) < need:
            raise ValueError(f"Attention: the scores scratch holds {_size(scores)} values, {need} needed")
        if xq is not None and s.head_dim % CHUNK:
            raise ValueError(f"Attention: a Q8_1 output needs head_dim a multiple of {CHUNK}, got {s.head_dim}")
        xq_t, planes, xq_stride = _q8_1_params(out, xq, n, "Attention")
        self.reads = (q.tensor, k.tensor, v.tensor, k_cache, v_cache, table, pos)
        self.writes = (k_cache, v_cache, scores, out.tensor) + ((xq_t,) if xq else ())
        self.quantized = (out.tensor, xq_t, planes) if xq else None
        push = [q.offset, k.offset, v.offset, out.offset, s.n_head, s.n_head_kv, s.head_dim, s.n_rot, s.capacity,
                _f32_bits(1.0 / np.sqrt(s.head_dim)), q.step, k.step, v.step, out.step, xq_stride,
                attention_scratch_size(device, s, split)]
        tensors = [q.tensor, k.tensor, v.tensor, k_cache, v_cache, table, pos, scores, out.tensor, xq_t]
        variant, _ = reducing_variant(device, "attention")
        kps = [t.kp for t in tensors]
        self.split = split
        self.launch = launch = attention_launch(device, s, split, spread)
        n_split = -(-s.capacity // split) if split else 1
        attend = 0 if n == 1 else 2  # shaders/attention.comp's PASS: 0 one query, 1 + 2 a chunk

        heads = attention_heads(s) if heads is None else heads
        group = s.n_head // s.n_head_kv
        if not isinstance(heads, int) or not 1 <= heads <= MAX_ATTENTION_HEADS or group % heads:
            raise ValueError(f"Attention: {heads!r} heads per workgroup; a divisor of the {group} query heads "
                             f"of a K/V head, at most {MAX_ATTENTION_HEADS}")

        q8_1 = xq is not None
        self.folded = fold and attention_folds(s, launch, split, heads, q8_1)
        cw, crows = launch.combine_wg or launch.wg, launch.combine_rows

        def dispatch(groups, combine, pass_, folded=False):  # (_Op.record puts a barrier between two dispatches)
            wg, lanes, rows = (cw, 1, 1) if combine else (launch.wg, launch.key_lanes, launch.value_rows)
            depth, combine_depth = _attention_pass_depths(s, launch, split, heads, q8_1, pass_ == 1)
            if combine:
                depth = combine_depth
            elif folded:  # its last workgroup's split, then its rounds of combines
                depth += attention_fold_rounds(launch, split, heads) * combine_depth
            self._dispatch(kps, variant, groups, [wg, planes, split, int(combine), pass_, heads, int(s.neox), lanes,
                                                  rows, int(folded), cw if combine or folded else 1,
                                                  crows if combine or folded else 1], push, depth)

        if n > 1:
            dispatch((s.n_head_kv, 1, n), False, 1)
        dispatch((s.n_head // heads, _groups(n_split, 1), n), False, attend, self.folded)
        if split and not self.folded:
            dispatch((s.n_head, 1, n), True, attend)


def swiglu_depth() -> int:
    """Serial depth (Launch) of shaders/swiglu.comp: a 32-value block per
    invocation, its 8 vec4s unrolled."""
    return 1


class SwiGLU(_Op):
    """out = silu(gate) * up for n vectors; with `xq`, out's Q8_1 blocks too."""

    def __init__(self, device, gate: Vectors, up: Vectors, out: Vectors, n: int = 1,
                 xq: Q8_1Output | None = None):
        super().__init__(device)
        for vec, what in ((gate, "SwiGLU gate"), (up, "SwiGLU up"), (out, "SwiGLU out")):
            if vec.length != gate.length:
                raise ValueError(f"{what}: {vec.length} values per vector, gate has {gate.length}")
            vec.check(n, what)
        xq_t, planes, xq_stride = _q8_1_params(out, xq, n, "SwiGLU")
        self.reads = (gate.tensor, up.tensor)
        self.writes = (out.tensor,) + ((xq_t,) if xq else ())
        self.quantized = (out.tensor, xq_t, planes) if xq else None
        push = [gate.length, gate.offset, gate.step, up.offset, up.step, out.offset, out.step, xq_stride]
        self._dispatch([gate.tensor.kp, up.tensor.kp, out.tensor.kp, xq_t.kp], VectorOpVariant("swiglu"),
                       (_groups(-(-gate.length // CHUNK), SWIGLU_WG), n, 1), [SWIGLU_WG, planes], push,
                       swiglu_depth())


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


def expert_routing_depth(n_expert: int, wg: int) -> int:
    """Serial depth (Launch) of shaders/expert_routing.comp: its loop over
    the logits (the top-k's loops read them from shared memory)."""
    return _ceil(n_expert, wg)


class ExpertRouting(_Op):
    """A mixture-of-experts router for n vectors of router logits: the
    n_used experts of the largest logits (descending; equal: lower index
    first; NaN as -inf), their weights the softmax probabilities over the
    chosen ones' sum: exactly the experts the host's `route` chooses
    (vkq.llama.host; why the logits: shaders/expert_routing.comp). Writes ids
    (int32) and weights (float32), n_used per vector, into one vector of each
    tensor (the layout a MUL_MAT_ID's ids take). Declares its ids in [0, n_expert) (`bounded_ids`):
    the shader keeps them so, whatever the logits."""

    def __init__(self, device, logits: Vectors, ids, weights, n_used: int, n: int = 1):
        super().__init__(device)
        n_expert = logits.length
        if not 1 <= n_expert <= MAX_EXPERTS:
            raise ValueError(f"ExpertRouting: {n_expert} experts; 1 to {MAX_EXPERTS}")
        if not 1 <= n_used <= min(n_expert, MAX_EXPERTS_USED):
            raise ValueError(f"ExpertRouting: {n_used} used experts; 1 to {min(n_expert, MAX_EXPERTS_USED)} "
                             f"of {n_expert}")
        logits.check(n, "ExpertRouting logits")
        for t, dtype, what in ((ids, np.int32, "ids"), (weights, np.float32, "weights")):
            if t.dtype != dtype or t.n != 1 or t.length != n * n_used:
                raise ValueError(f"ExpertRouting {what}: one {np.dtype(dtype).name} vector of {n * n_used} "
                                 f"({n} x {n_used}), got {t!r}")
        self.reads, self.writes = (logits.tensor,), (ids, weights)
        self.bounded_ids = ((ids, n_expert),)
        variant, wg = reducing_variant(device, "expert_routing")
        push = [n_expert, n_used, logits.offset, logits.step]
        self._dispatch([logits.tensor.kp, ids.kp, weights.kp], variant, (_groups(n, 1), 1, 1), [wg], push,
                       expert_routing_depth(n_expert, wg))


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
