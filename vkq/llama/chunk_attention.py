"""Attention of a prompt's chunk of queries, tiled (shaders/attention_tiled.comp).

TiledAttention takes a chunk of n tokens as vkq.llama.vector_ops.Attention
does (RoPE, the keys and values appended to the caches, causal grouped-query
attention over them), but each workgroup takes a tile of queries and walks
the keys in tiles: each key and value is read once per tile of queries, not
once per query, and there is no scores scratch (an online softmax per query
and head, in registers). A query's result depends only on its position and
the caches, never on the chunk it came in (the key tiles are aligned to
absolute positions): a prompt gives the same bits in chunks of any size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..device.shader_variants import VectorOpVariant
from .vector_ops.attention import (AttentionShape, attention_depth, attention_heads, check_attention_vectors,
                                   check_sinks)
from .vector_ops.common import Vectors, _ceil, _f32_bits, _groups, _Op, _size, reducing_variant

# On a CPU driver an invocation takes several rows (query heads of one
# query, then queries), so that each key and value it loads serves them all
# (lavapipe loads for each lane, though all lanes read one address there:
# the more rows a load serves, the faster, as measured): up to CPU_LANE_VALUES values
# of queries (and as many of accumulators), CPU_LANES invocations
# (lavapipe's subgroup) per workgroup, CPU_KEY_TILE keys per tile.
# Measured on lavapipe (2 busy cores; SmolLM2's shape, a 512-token chunk on
# an empty cache, the attend's CPU time; 2026-11-27): rows per invocation
# 1 / 3 / 6 / 12: 126 / 46 / 32 / 26-39 ms, but the first compile of the
# pipeline grows faster: 0.5 / 1.2 / 3.2 / 12.8 CPU-s; 16 keys per tile
# against 8 and 32 (12 rows): 26 against 44 and 31 ms.
CPU_LANES = 8
CPU_LANE_VALUES = 384
CPU_KEY_TILE = 16
# On a CPU driver with vkq's kp, the caches of whole-vec4 heads are read
# through texel views (attention_tiled.comp's TEXEL_KV), where they fit the
# device's maxTexelBufferElements: on lavapipe (SmolLM2's shape, a 512-token
# chunk on an empty cache, the attend alone) 14-18 against 23-30 ms (2026-11-27,
# docs/measurements.md).
# On a GPU a row (a query's head) is spread over row_lanes invocations,
# each holding GPU_LANE_VEC4S vec4s of its accumulator (up to
# GPU_ROW_LANES invocations a row); a whole head's query and accumulator in
# one invocation (256 floats at head_dim 128) spilled on every GPU class's
# compiler (docs/measurements.md, 'GPU compilers'). The rows' queries and
# scores and the K and V tiles go through shared memory, within
# GPU_SHARED_BYTES and the device's limit: on RDNA four such workgroups
# share a workgroup processor's 128 KiB, and NVIDIA's 48 KiB take one. Up
# to GPU_QUERY_TILE queries and GPU_INVOCATIONS invocations per workgroup,
# GPU_KEY_TILE keys per tile; first fewer queries where the workgroup is too
# large, then fewer keys (down to 8) and queries where shared memory is.
# Compiled for each GPU class, not measured on a GPU yet.
GPU_QUERY_TILE = 16
GPU_KEY_TILE = 16
GPU_SHARED_BYTES = 32768
GPU_INVOCATIONS = 256
GPU_LANE_VEC4S = 4
GPU_ROW_LANES = 8


@dataclass(frozen=True)
class AttentionTiles:
    """A TiledAttention's launch: queries (bq) and query heads (heads) per
    workgroup, keys per tile (bkv), whether the K/V tiles go through shared
    memory, and the rows (a query's head) of each invocation: lane_heads
    heads of lane_queries queries, or (row_lanes > 1, with shared_kv and
    a row per invocation group) a row over row_lanes invocations, which
    divides bkv. Only bkv changes a query's bits."""

    bq: int
    bkv: int
    heads: int
    shared_kv: bool
    lane_heads: int = 1  # query heads per invocation (a divisor of heads)
    lane_queries: int = 1  # queries per invocation (a divisor of bq)
    texel_kv: bool = False  # the caches read through texel views (whole-vec4 heads)
    row_lanes: int = 1  # invocations per row (> 1: shared_kv, lane_heads and lane_queries 1)

    @property
    def wg_size(self) -> int:
        return self.bq * self.heads // (self.lane_heads * self.lane_queries) * self.row_lanes

    def shared_bytes(self, head_dim: int) -> int:
        """attention_tiled.comp's shared memory: the K and V tiles, and
        with row_lanes > 1 the rows' queries and scores (heads padded by a
        vec4 there)."""
        if not self.shared_kv:
            return 0
        spread = self.row_lanes > 1
        stride = 16 * (_ceil(head_dim, 4) + spread)
        rows = self.bq * self.heads if spread else 0
        return 2 * self.bkv * stride + rows * (stride + 4 * self.bkv)


def attention_tiles(device, shape: AttentionShape) -> AttentionTiles:
    """The tiles for this device and shape: a function of nothing else (not
    of the chunk), since the key tile fixes a query's order of the sums."""
    heads = attention_heads(shape)
    caps = device.caps
    if caps.device_type == "cpu":
        lane_heads = max(d for d in range(1, heads + 1) if heads % d == 0 and d * shape.head_dim <= CPU_LANE_VALUES
                         or d == 1)
        lane_queries = 1
        while lane_heads * lane_queries * 2 * shape.head_dim <= CPU_LANE_VALUES:
            lane_queries *= 2
        return AttentionTiles(CPU_LANES * lane_queries, CPU_KEY_TILE, heads, False, lane_heads, lane_queries,
                              texel_kv_fits(device, shape))
    limit = min(GPU_SHARED_BYTES, caps.max_shared_memory)
    invocations = min(GPU_INVOCATIONS, caps.max_workgroup_invocations, caps.max_workgroup_size_x)
    row_lanes = 1
    while row_lanes < GPU_ROW_LANES and row_lanes * GPU_LANE_VEC4S < _ceil(shape.head_dim, 4):
        row_lanes *= 2
    bq, bkv = GPU_QUERY_TILE, GPU_KEY_TILE
    while True:
        t = AttentionTiles(bq, bkv, heads, True, row_lanes=row_lanes)
        fits = t.shared_bytes(shape.head_dim) <= limit
        if t.wg_size <= invocations and fits:
            return t
        if t.wg_size > invocations and bq > 1:
            bq //= 2
        elif not fits and bkv > max(8, row_lanes):
            bkv //= 2
        elif bq > 1:
            bq //= 2
        elif row_lanes > 1:  # (little shared memory, or few invocations: a row per invocation, K/V tiles alone)
            row_lanes, bkv = 1, GPU_KEY_TILE
        elif bkv > 1:
            bkv //= 2
        else:
            raise ValueError(f"TiledAttention: no tile of {shape} fits the device's {limit} bytes of shared memory "
                             f"and {invocations} invocations per workgroup")


def attend_spec(shape: AttentionShape, tiles: AttentionTiles, vec4_io: bool, split: int = 0,
                sinks: bool = False) -> list[int]:
    """attention_tiled.comp's specialization constants for the attend at
    these tiles (vec4_io: q's and out's heads are whole vec4s; split:
    positions per workgroup, 0 none; sinks: the heads' attention sinks).
    ROW_LANES and SINKS only where they are not 1 and false, so that a row
    per invocation without sinks is the pipeline it always was."""
    spec = [tiles.wg_size, shape.head_dim, tiles.heads, tiles.bq, tiles.bkv, int(shape.neox), int(tiles.shared_kv),
            shape.n_rot, tiles.lane_heads, tiles.lane_queries, int(vec4_io), split]
    if tiles.row_lanes > 1 or sinks:
        spec += [0, tiles.row_lanes]  # (COMBINE 0, ROW_LANES)
    return spec + ([1] if sinks else [])  # (SINKS)


def texel_kv_fits(device, shape: AttentionShape) -> bool:
    """Whether this device can read shape's caches through u32x4 texel views:
    vkq's kp, heads of whole vec4s, a cache within maxTexelBufferElements."""
    return (device.patched_kp and shape.head_dim % 4 == 0
            and shape.cache_size // 4 <= device.caps.max_texel_buffer_elements)


def tiled_attention_loop_iterations(positions: int, bkv: int) -> int:
    """The loop iterations one invocation of shaders/attention_tiled.comp
    takes over `positions` positions (its queries' largest position plus
    one, or a split's), on a driver that unrolls the loops [[unroll]] marks
    (lavapipe does): the loop over the key tiles, and in each tile two over
    its keys (the scores, the values), each loop counting one more for its
    exit test. Measured on lavapipe (SmolLM2's shape, 16 keys per tile, no
    split): right at 29,958 positions, wrong at 29,960; this allows 29,957."""
    tiles = _ceil(positions, bkv)
    return 3 * tiles + 2 * positions + 1


def max_tiled_attention_positions(device, bkv: int) -> int | None:
    """The most positions a cache may hold for shaders/attention_tiled.comp
    on this device (None: no loop budget)."""
    budget = device.caps.max_loop_iterations
    if budget is None:
        return None
    lo, hi = 0, budget  # the largest within the budget, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tiled_attention_loop_iterations(mid, bkv) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def tiled_attention_split(device, shape: AttentionShape, tiles: AttentionTiles) -> int:
    """Positions per workgroup of the tiled attend (0: all of them): where
    the capacity is more than the loop budget allows
    (max_tiled_attention_positions), the most that it allows, in whole key
    tiles; a second dispatch then combines the splits."""
    most = max_tiled_attention_positions(device, tiles.bkv)
    if most is None or shape.capacity <= most:
        return 0
    return most // tiles.bkv * tiles.bkv


def split_partials_size(shape: AttentionShape, n: int, split: int) -> int:
    """Floats of the partial results a split attend of n queries keeps for
    the combine (0: split 0, none): per query head and split, its output
    vector, running maximum and sum."""
    return n * shape.n_head * _ceil(shape.capacity, split) * (shape.head_dim + 2) if split else 0


def tiled_attention_depth(shape: AttentionShape, tiles: AttentionTiles, split: int = 0) -> int:
    """Serial depth (Launch) of the tiled attend at a full cache: RoPE of the
    row's query (unrolled), then a step per key tile (with shared memory,
    its loads unrolled), or (without) two per key, reading the caches; over
    a split's positions only where split."""
    positions = split or shape.capacity
    return 1 + _ceil(positions, tiles.bkv) + (0 if tiles.shared_kv else 2 * positions)


def tiled_attention_combine_depth(n_split: int) -> int:
    """Serial depth (Launch) of the combine: two loops over the splits."""
    return 2 * n_split


COMBINE_WG = 64  # rows (a query's head) per workgroup of the combine: one each


class TiledAttention(_Op):
    """Attention of n queries at positions pos[0..n-1] (a prompt's chunk;
    `positions`: an int32 tensor): RoPE of q and k as
    vkq.llama.vector_ops.Attention's (shape.neox picks the mode), every k and
    v appended to the caches at its position (attention.comp's PASS 1), then
    out = softmax(q . K^T / sqrt(head_dim)) V per query head over the cached
    positions 0 .. pos[i] (shaders/attention_tiled.comp; the window, scale
    and soft-cap of the shape as Attention's). q, k, v: the new
    vectors, unrolled, as Attention takes them; rope: rope_table(inv_freq,
    shape.capacity). The caller keeps the positions below the capacity.
    tiles: default attention_tiles(device, shape). split: positions per
    workgroup, then a third dispatch combines them (default
    tiled_attention_split: under lavapipe's loop budget, past 29,957
    positions at 16 keys per tile; else 0, none)."""

    def __init__(self, device, shape: AttentionShape, q: Vectors, k: Vectors, v: Vectors, k_cache, v_cache,
                 rope, positions, out: Vectors, n: int, tiles: AttentionTiles | None = None,
                 split: int | None = None, sinks=None):
        super().__init__(device)
        check_sinks("TiledAttention", shape, sinks)
        s = shape
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"TiledAttention: {n!r} queries; at least 1")
        check_attention_vectors("TiledAttention", s, q, k, v, out, n)
        tiles = attention_tiles(device, s) if tiles is None else tiles
        group = s.n_head // s.n_head_kv
        caps = device.caps
        if min(tiles.bq, tiles.bkv, tiles.heads, tiles.lane_heads, tiles.lane_queries, tiles.row_lanes) < 1 \
                or group % tiles.heads or tiles.heads % tiles.lane_heads or tiles.bq % tiles.lane_queries:
            raise ValueError(f"TiledAttention: {tiles}: heads must divide the {group} query heads of a K/V head, "
                             "lane_heads divide heads and lane_queries divide bq")
        if tiles.row_lanes > 1 and (not tiles.shared_kv or tiles.lane_heads * tiles.lane_queries > 1
                                    or tiles.bkv % tiles.row_lanes):
            raise ValueError(f"TiledAttention: {tiles}: row_lanes > 1 needs shared_kv, a row per invocation group "
                             "(lane_heads and lane_queries 1) and row_lanes dividing bkv")
        if tiles.wg_size > min(caps.max_workgroup_invocations, caps.max_workgroup_size_x):
            raise ValueError(f"TiledAttention: {tiles.wg_size} invocations per workgroup; the device takes "
                             f"{min(caps.max_workgroup_invocations, caps.max_workgroup_size_x)}")
        if tiles.shared_bytes(s.head_dim) > caps.max_shared_memory:
            raise ValueError(f"TiledAttention: K/V tiles of {tiles.shared_bytes(s.head_dim)} bytes; the device's "
                             f"shared memory is {caps.max_shared_memory}")
        texels = 4 * caps.max_texel_buffer_elements
        if tiles.texel_kv and not (texel_kv_fits(device, s) and max(_size(k_cache), _size(v_cache)) <= texels):
            raise ValueError(f"TiledAttention: texel_kv needs vkq's kp, a head_dim that is a multiple of 4 and "
                             f"caches of at most {texels} values (the device's texel views); {s}")
        split = tiled_attention_split(device, s, tiles) if split is None else split
        most = max_tiled_attention_positions(device, tiles.bkv)
        if not isinstance(split, int) or split < 0 or split % tiles.bkv \
                or (most is not None and (split or s.capacity) > most):
            raise ValueError(f"TiledAttention: split {split!r}: a multiple of the {tiles.bkv} keys per tile, 0 for "
                             f"none{'' if most is None else f', at most {most} positions (a loop budget)'}; "
                             f"{s.capacity} positions")
        for cache, what in ((k_cache, "K cache"), (v_cache, "V cache")):
            if _size(cache) < s.cache_size:
                raise ValueError(f"TiledAttention: the {what} holds {_size(cache)} values; {s} needs {s.cache_size}")
        if _size(rope) < s.capacity * s.n_rot:
            raise ValueError(f"TiledAttention: the RoPE table holds {_size(rope)} values, {s.capacity * s.n_rot} "
                             "needed")
        if positions.dtype != np.int32 or _size(positions) < n:
            raise ValueError(f"TiledAttention: {n} queries need an int32 positions tensor of {n}, got {positions!r}")
        self.tiles = tiles
        self.reads = (q.tensor, k.tensor, v.tensor, k_cache, v_cache, rope, positions) + ((sinks,) if sinks else ())
        self.writes = (k_cache, v_cache, out.tensor)
        scale = _f32_bits(s.query_scale)

        # The append: attention.comp's PASS 1 (bindings 7 to 9, scores and
        # Q8_1 output, are not read there: out's tensor fills them).
        variant, wg = reducing_variant(device, "attention")
        push = [q.offset, k.offset, v.offset, out.offset, s.n_head, s.n_head_kv, s.head_dim, s.n_rot, s.capacity,
                scale, q.step, k.step, v.step, out.step, 0, 0] + s.push_tail()
        tensors = [t.kp for t in (q.tensor, k.tensor, v.tensor, k_cache, v_cache, rope, positions, out.tensor,
                                  out.tensor, out.tensor, out.tensor)]
        self._dispatch(tensors, variant, (s.n_head_kv, 1, n), [wg, 0, 0, 0, 1, 1, int(s.neox)], push,
                       attention_depth(s, wg, 0, 1, append=True))

        # The attend (_Op.record puts a barrier before it), and the combine of its splits.
        self.split = split
        n_split = _ceil(s.capacity, split) if split else 1
        # The splits' partial results: only this op's (without splits, out fills the unread binding);
        # vkq.llama.context_fit counts them before a decoder allocates anything.
        partials = device.tensor(split_partials_size(s, n, split)) if split else out.tensor.kp
        push = [q.offset, q.step, out.offset, out.step, n, n_split, s.n_head, s.n_head_kv, s.capacity, scale,
                *s.push_tail()]
        tensors = [t.kp for t in (q.tensor, k_cache, v_cache, rope, positions, out.tensor)] + [partials]
        kinds = None
        if tiles.texel_kv:
            tensors += [k_cache.kp, v_cache.kp]
            kinds = ["storage"] * 7 + ["texel_u32x4"] * 2 + ["storage"]
        else:
            tensors += [out.tensor.kp, out.tensor.kp]  # (bindings 7 and 8: read only under TEXEL_KV)
        tensors.append((out.tensor if sinks is None else sinks).kp)  # (binding 9: read only under SINKS)
        attend = VectorOpVariant("attention_tiled", texel_kv=tiles.texel_kv)
        groups = (_groups(s.n_head // tiles.heads, 1), _groups(_ceil(n, tiles.bq), 1), _groups(n_split, 1))
        spec = attend_spec(s, tiles, all(x % 4 == 0 for x in (q.offset, q.step, out.offset, out.step, s.head_dim)),
                           split, sinks is not None)
        self._dispatch(tensors, attend, groups, spec, push, tiled_attention_depth(s, tiles, split), kinds)
        if split:  # (the combine: an invocation per row, whatever the attend's tiles; it takes the sinks)
            # (COMBINE set; with sinks ROW_LANES 1 and SINKS)
            combine = [COMBINE_WG] + spec[1:12] + [1] + ([1, 1] if sinks is not None else [])
            self._dispatch(tensors, attend, (_groups(n * s.n_head, COMBINE_WG), 1, 1), combine, push,
                           tiled_attention_combine_depth(n_split), kinds)
