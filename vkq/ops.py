"""Recordable GPU operations: the Q8_1 quantizer, MUL_MAT_ID's sort by expert, the mat-vec and mat-mat
dispatches.

These build Kompute algorithms (one per weights buffer) bound to given
input/output tensors; `record(seq)` appends their dispatches to a sequence.
`Backend.matvec` records one mat-vec per sequence; `vkq.commands.bench_step` records a
whole decode step. Pipelines are built once here, never per call.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import kp
import numpy as np

from .blocks.formats import CHUNK
from .device.runtime import Device
from .device.shader_variants import GROUP_BY_EXPERT, QUANTIZE_Q8_1, MatMulVariant, MatVecVariant
from .dispatch.config import PipelineConfig
from .dispatch.tiles import TileConfig

QUANTIZE_WG = 64  # quantizer threads per workgroup (one per block; a tiny share of the time)
MAX_GROUPS_X = 65535  # Vulkan guarantees this many workgroups per dimension


@dataclass(frozen=True)
class Launch:
    """One dispatch as a GPU sees it: `groups` workgroups (x, y, z) of
    `invocations` each, and its serial depth: the most loop iterations with
    global loads that one invocation runs one after another. A GPU hides a
    load's latency (~0.5-1 us) only with other invocations' work, so a
    dispatch costs at least depth latencies however short its vectors.
    Counted from the shader's loops by the op kind's *_depth function
    (matvec_depth; vkq.llama.vector_ops's): a loop whose trip count is a
    push constant counts its iterations (nested ones multiply); a loop of a
    fixed count (a block's 8 vec4s, a specialization constant's rows, heads
    or slots) is unrolled, its loads issued together, and counts once."""

    groups: tuple[int, int, int]
    invocations: int  # per workgroup
    depth: int

    @property
    def workgroups(self) -> int:
        return prod(self.groups)

    @property
    def total(self) -> int:
        """Invocations of the whole dispatch."""
        return self.workgroups * self.invocations

# shaders/common.glsl's `Params`, the push constants of the shaders that read
# a weights buffer (mul_mat_vec.comp, get_rows.comp), in order; a test checks
# it against the GLSL.
WEIGHTS_PARAMS = ("nrows", "nblocks", "field0", "field1", "field2", "field3", "x_col_stride", "x_slot_stride",
                  "y_col_stride", "y_slot_stride", "y_row_offset")


def weights_push(buf, nblocks: int, **values: int) -> np.ndarray:
    """The Params of one weights buffer: its row count, first row and field
    offsets from `buf` (a vkq.blocks.layout buffer), the rest by name; every name
    is required, so a push cannot drift from the shader's layout."""
    fields = buf.field_offsets + [0] * (4 - len(buf.field_offsets))
    values = {"nrows": buf.rows.count, "nblocks": nblocks, "y_row_offset": buf.rows.start,
              **{f"field{i}": f for i, f in enumerate(fields)}, **values}
    if set(values) != set(WEIGHTS_PARAMS):
        raise ValueError(f"Params: got {sorted(values)}, the shader's are {WEIGHTS_PARAMS}")
    return np.array([values[name] for name in WEIGHTS_PARAMS], np.uint32)


def q8_1_words(n_vectors: int, k_pad: int, planes: int = 1) -> int:
    """Words of n_vectors quantized activations: per block, 8 words of quants
    per plane and 4 of scales and sums."""
    return n_vectors * (k_pad // CHUNK) * (8 * planes + 4)


class QuantizeQ8_1:
    """x (n_vectors x k_pad floats) -> xq (Q8_1 blocks of `planes` planes), for the int8 path."""

    def __init__(self, device: Device, x, xq, n_vectors: int, k_pad: int, planes: int = 1):
        nbx = k_pad // CHUNK
        groups = (-(-nbx // QUANTIZE_WG), n_vectors, 1)
        push = np.array([nbx, k_pad, nbx], np.uint32)
        self.algorithm = device.algorithm([x, xq], QUANTIZE_Q8_1, groups, [QUANTIZE_WG, planes], push)

    def record(self, seq) -> None:
        seq.record(kp.OpAlgoDispatch(self.algorithm))

    def destroy(self) -> None:
        self.algorithm.destroy()


def fused_swiglu_fits(weights) -> bool:
    """Whether a mat-vec with a fused SwiGLU (glu) can take these weights: a
    matrix (or an expert stack of matrices) of an even row count (a gate|up
    stack) in one weights buffer, so that a workgroup reads a gate row and
    its up row from the same buffer."""
    return weights.layout.rows % 2 == 0 and len(weights.buffers) == 1


def matvec_depth(cfg: PipelineConfig, k: int) -> int:
    """Serial depth (Launch) of shaders/mul_mat_vec.comp over rows of k
    values: its loop over a row's units of chunks_per_thread 32-value chunks
    (the unit's chunks, rows and columns unrolled), every unit of the row
    per invocation, or with split_k one in wg_size of them."""
    units = -(-k // CHUNK) // cfg.chunks_per_thread
    return -(-units // cfg.wg_size) if cfg.split_k else units


class _PerBuffer:
    """An op of one dispatch per weights buffer (`algorithms`, in the
    buffers' order; `_barrier`: the device's compute_barrier)."""

    algorithms: list

    def record(self, seq) -> None:
        for i, algo in enumerate(self.algorithms):
            if i:
                # The buffers write disjoint rows of y; the barrier keeps the
                # validation layer's hazard tracking (whole-buffer) clean.
                seq.record(self._barrier())
            seq.record(kp.OpAlgoDispatch(algo))

    def destroy(self) -> None:
        for algo in self.algorithms:
            algo.destroy()


def matvec_launches(cfg: PipelineConfig, k: int, buffer_rows, n_slots: int = 0) -> list[Launch]:
    """MatVec's launches on `cfg` over rows of k values, one per weights
    buffer of buffer_rows[i] rows: its rows per workgroup (with glu a
    group's rows are half gate rows, half up rows: as many groups for half
    the outputs), x by groups of MAX_GROUPS_X and z past them, y by
    used-expert slots. Also what another device's choice would launch
    (vkq.llama.profile.MatvecView)."""
    rows_per_group = cfg.rows_per_wg * (1 if cfg.split_k else cfg.wg_size)
    out = []
    for rows in buffer_rows:
        groups = -(-rows // rows_per_group)
        gx, gz = min(groups, MAX_GROUPS_X), -(-groups // MAX_GROUPS_X)
        out.append(Launch((gx, max(n_slots, 1), gz), cfg.wg_size, matvec_depth(cfg, k)))
    return out


def matvec_spec(cfg: PipelineConfig, ncols: int, slots_per_x: int = 1, glu: bool = False,
                accumulate: bool = False) -> list[int]:
    """shaders/mul_mat_vec.comp's specialization constants for a launch on `cfg`."""
    return [cfg.wg_size, cfg.rows_per_wg, ncols, cfg.chunks_per_thread, int(cfg.split_k), cfg.x_planes,
            int(cfg.value_lookup == "selects"), slots_per_x, int(glu), int(accumulate)]


def matvec_bindings(cfg: PipelineConfig, mul_mat_id: bool) -> list[str]:
    """Binding kinds in shaders/mul_mat_vec.comp's order: W, x, y, [ids], [W's three texel views]."""
    kinds = ["storage", "texel_u32x4" if cfg.x_binding == "texel" else "storage", "storage"]
    kinds += ["storage"] if mul_mat_id else []
    kinds += ["texel_u32", "texel_u32x2", "texel_u32x4"] if cfg.weights_binding == "texel" else []
    return kinds


def matvec_variant(qtype: str, cfg: PipelineConfig, mul_mat_id: bool) -> MatVecVariant:
    return MatVecVariant(qtype, cfg.path == "mmvq", cfg.int_dot, cfg.subgroup, mul_mat_id, cfg.weights_binding,
                         cfg.x_binding)


class MatVec(_PerBuffer):
    """y = W @ x for every weights buffer of one matrix (or expert stack).

    x_in: fp32 tensor (dmmv) or its Q8_1 tensor (mmvq), `ncols` columns of
    k_pad values each. For MUL_MAT_ID, `n_slots` used-expert slots read the
    expert in `ids[slot]` and x column `slot // slots_per_x` (or column 0
    when shared_x).
    y: `ncols` (or `n_slots`) vectors of `rows` floats, `y_stride` apart
    (default `rows`). glu: W is a stacked gate|up matrix (MUL_MAT_ID: every
    expert's) in one buffer and y = silu(W_gate x) * (W_up x), rows / 2 floats
    per vector
    (shaders/mul_mat_vec.comp's GLU; an even rows_per_wg). accumulate:
    y += W @ x, the product added into what y holds (its ACCUMULATE: y is
    read and written; the bits of the product added afterwards), not with
    MUL_MAT_ID or glu. subgroup_size: the subgroup size its pipelines ask
    for (Backend.matvec_subgroup_size: the wave the device's class table
    assumes), or None (the driver's choice).
    `cfg` as vkq.resolve.resolve returns it: bindings fitted to the device's
    limits for these tensors; `self.cfg` is what runs.
    """

    def __init__(self, device: Device, weights, cfg: PipelineConfig, x_in, y, *, ncols: int = 1,
                 ids=None, n_slots: int = 0, shared_x: bool = False, slots_per_x: int = 1,
                 y_stride: int | None = None, glu: bool = False, accumulate: bool = False,
                 subgroup_size: int | None = None):
        lay = weights.layout
        mul_mat_id = ids is not None
        if accumulate and (mul_mat_id or glu):
            # (MUL_MAT_ID's slots are not y's one vector per column; with glu,
            # silu(g) * u + y may be contracted into one fma: other bits)
            raise ValueError(f"accumulate (y += W x) takes a plain mat-vec, not "
                             f"{'MUL_MAT_ID' if mul_mat_id else 'a fused SwiGLU (glu)'}")
        if glu and (not fused_swiglu_fits(weights) or cfg.rows_per_wg % 2):
            raise ValueError(f"a fused SwiGLU takes a gate|up matrix of even rows in one buffer and an even "
                             f"rows_per_wg: got {weights!r}, {len(weights.buffers)} buffer(s), rows_per_wg "
                             f"{cfg.rows_per_wg}")
        self.cfg = cfg
        texel_weights = cfg.weights_binding == "texel"
        self.variant = matvec_variant(lay.fmt.name, cfg, mul_mat_id)
        x_stride = lay.k_padded // CHUNK if cfg.path == "mmvq" else lay.k_padded
        y_stride = lay.rows // (2 if glu else 1) if y_stride is None else y_stride
        spec = matvec_spec(cfg, ncols, slots_per_x, glu, accumulate)
        kinds = matvec_bindings(cfg, mul_mat_id)
        # What it was made for (a profile's view of another device's choice: vkq.llama.profile.MatvecView);
        # not the weights themselves, which a cached call's graph must not keep alive.
        self.layout, self.buffer_rows = lay, tuple(buf.rows.count for buf in weights.buffers)
        self.ncols, self.n_slots, self.glu = ncols, n_slots, glu
        self.launches: list[Launch] = matvec_launches(cfg, lay.k, self.buffer_rows, n_slots)  # one per algorithm
        self.algorithms = []
        for buf, launch in zip(weights.buffers, self.launches):
            push = weights_push(buf, lay.nblocks, x_col_stride=x_stride, x_slot_stride=0 if shared_x else x_stride,
                                y_col_stride=y_stride, y_slot_stride=y_stride)
            tensors = [buf.tensor, x_in, y] + ([ids] if mul_mat_id else [])
            if texel_weights:
                tensors += [buf.tensor] * 3
            self.algorithms.append(device.algorithm(tensors, self.variant, launch.groups, spec, push, kinds,
                                                    required_subgroup_size=subgroup_size))
        self._barrier = device.compute_barrier


# Invocations of a group_by_expert workgroup (one workgroup per expert): each
# scans a run of slots/GROUP_WG ids twice and the workgroup's counts once,
# at most 2 * 1024 + 64 loop iterations for MAX_MATMUL_COLS slots (within
# lavapipe's budget, vkq.dispatch.README "Limits").
GROUP_WG = 64


class GroupByExpert:
    """MUL_MAT_ID's used-expert slots sorted by expert
    (shaders/group_by_expert.comp): ids, an int32 tensor of n_slots expert
    ids in [0, n_expert) (the caller checks them), into groups, a uint32
    tensor of n_expert + n_slots values that MatMul reads. One sort serves
    every mat-mat over the same ids and experts count (a MoE layer's gate,
    up and down)."""

    def __init__(self, device: Device, ids, groups, n_expert: int):
        if n_expert > MAX_GROUPS_X:
            raise ValueError(f"MUL_MAT_ID sorts the slots with a workgroup per expert: {n_expert} experts; at "
                             f"most {MAX_GROUPS_X}")
        if groups.size() != n_expert + ids.size():
            raise ValueError(f"groups of {groups.size()} for {ids.size()} slots of {n_expert} experts: it must "
                             f"hold {n_expert + ids.size()}")
        self.algorithm = device.algorithm([ids, groups], GROUP_BY_EXPERT, (n_expert, 1, 1), [GROUP_WG, n_expert], [])

    def record(self, seq) -> None:
        seq.record(kp.OpAlgoDispatch(self.algorithm))

    def destroy(self) -> None:
        self.algorithm.destroy()


def id_tiles(n_slots: int, n_expert: int, bn: int) -> int:
    """Column tiles the MUL_MAT_ID kernel dispatches: the most that n_slots
    slots sorted by expert can fill, bn a tile, each expert's last tile
    partial (at most min(n_expert, n_slots) experts have slots)."""
    return (n_slots + min(n_expert, n_slots) * (bn - 1)) // bn


def matmul_spec(cfg: TileConfig, slots_per_x: int = 1, n_expert: int = 1) -> list[int]:
    """shaders/mul_mm.comp's specialization constants for a launch on `cfg`
    (the cooperative-matrix kernel's fragment shape, then its int8 layout, last)."""
    return [cfg.wg_size, cfg.bm, cfg.bn, cfg.bk_chunks, cfg.tm, cfg.tn, int(cfg.value_lookup == "selects"),
            int(cfg.shared_tiles), cfg.x_planes, slots_per_x, n_expert, *cfg.fragment, int(cfg.padded_halves)]


def matmul_bindings(cfg: TileConfig, mul_mat_id: bool) -> list[str]:
    """Binding kinds in shaders/mul_mm.comp's order: W, x, y, [groups], [W's three texel views]."""
    texel = cfg.binding == "texel"
    kinds = ["storage", "texel_u32x4" if texel else "storage", "storage"]
    kinds += ["storage"] if mul_mat_id else []
    kinds += ["texel_u32", "texel_u32x2", "texel_u32x4"] if texel else []
    return kinds


def matmul_variant(qtype: str, cfg: TileConfig, mul_mat_id: bool) -> MatMulVariant:
    return MatMulVariant(qtype, cfg.binding, cfg.path == "mmvq", cfg.int_dot, mul_mat_id, cfg.coopmat)


class MatMul(_PerBuffer):
    """y = W @ x for many columns (shaders/mul_mm.comp), over every weights
    buffer of one matrix: x_in exactly `ncols` vectors of k_pad floats, or
    on the int8 path their Q8_1 blocks (the shader counts its columns from
    x's length), y `ncols` vectors of `rows`
    floats `y_stride` apart (default `rows`). `cfg` as
    vkq.resolve.resolve_tiles returns it (bindings fitted to these tensors).

    MUL_MAT_ID (`groups`: `n_slots` used-expert slots sorted by expert, as
    GroupByExpert writes them for this stack's n_expert): W is an expert
    stack, slot s multiplies expert ids[s] by x vector s // slots_per_x
    (ncols * slots_per_x == n_slots) and y holds n_slots vectors. The
    mat-mat runs a column tile per bn slots of an expert (its "Experts"
    note): each expert's weights are read once per tile."""

    def __init__(self, device: Device, weights, cfg: TileConfig, x_in, y, *, ncols: int,
                 y_stride: int | None = None, groups=None, n_slots: int = 0, slots_per_x: int = 1):
        lay = weights.layout
        self.cfg = cfg
        mmq = cfg.path == "mmvq"
        mul_mat_id = groups is not None
        if mul_mat_id != weights.is_expert_stack:
            raise ValueError(f"MUL_MAT_ID takes an expert stack and its slots grouped by expert, a plain product a "
                             f"matrix: got {weights!r} with{'' if mul_mat_id else 'out'} groups")
        if mul_mat_id and (n_slots != ncols * slots_per_x or groups.size() != lay.n_expert + n_slots):
            raise ValueError(f"MUL_MAT_ID: {n_slots} slots, {ncols} vectors of x read by {slots_per_x} slots each, "
                             f"groups of {groups.size()} for {lay.n_expert} experts: the counts must agree")
        self.variant = matmul_variant(lay.fmt.name, cfg, mul_mat_id)
        texel = cfg.binding == "texel"
        spec = matmul_spec(cfg, slots_per_x, lay.n_expert)
        kinds = matmul_bindings(cfg, mul_mat_id)
        x_words = q8_1_words(ncols, lay.k_padded, cfg.x_planes) if mmq else ncols * lay.k_padded
        if x_in.size() != x_words:
            raise ValueError(f"x must hold exactly {ncols} vectors ({x_words} words; the shader counts its columns "
                             f"from its length), got {x_in.size()}")
        col_groups = id_tiles(n_slots, lay.n_expert, cfg.bn) if mul_mat_id else -(-ncols // cfg.bn)
        if col_groups > MAX_GROUPS_X:
            raise ValueError(f"{n_slots if mul_mat_id else ncols} columns take {col_groups} workgroups of "
                             f"{cfg.bn}; at most {MAX_GROUPS_X}")
        # The cooperative-matrix kernel's subgroups are coopmat_subgroup invocations (its sums are split
        # among them): required of the pipeline where the device lets one be (else the driver's own size,
        # which the self-check holds to it).
        subgroup = {"required_subgroup_size": cfg.coopmat_subgroup} if cfg.coopmat and device.subgroup_size_control \
            else {}
        self.algorithms = []
        for buf in weights.buffers:
            groups_x = -(-buf.rows.count // cfg.bm)
            push = weights_push(buf, lay.nblocks, x_col_stride=lay.k_padded // CHUNK if mmq else lay.k_padded,
                                x_slot_stride=0,
                                y_col_stride=lay.rows if y_stride is None else y_stride, y_slot_stride=0)
            tensors = [buf.tensor, x_in, y] + ([groups] if mul_mat_id else []) + ([buf.tensor] * 3 if texel else [])
            self.algorithms.append(device.algorithm(tensors, self.variant, (min(groups_x, MAX_GROUPS_X), col_groups,
                                                                            -(-groups_x // MAX_GROUPS_X)),
                                                    spec, push, kinds, **subgroup))
        self._barrier = device.compute_barrier
