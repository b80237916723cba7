"""Attention: RoPE of the new query and key, the new key and value
appended to the float32 KV cache at the position in a device int32 tensor,
and grouped-query attention over the cache, causal: one dispatch per layer
(a split context and its combine: two), and how its launches spread on a
GPU (attention_split, attention_launch) with their serial depths."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...blocks.formats import CHUNK
from .common import Q8_1Output, Vectors, _ceil, _f32_bits, _groups, _Op, _q8_1_params, _size, reducing_variant, spreads

# Positions of a KV cache: pos is a uint in the shaders; more than anyone's context.
MAX_KV_CAPACITY = 1 << 20


@dataclass(frozen=True)
class AttentionShape:
    """The attention geometry of a layer."""

    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    capacity: int  # positions the KV cache holds
    neox: bool = False  # RoPE's pairs (x[i], x[i + n_rot/2]) (ggml's neox mode), else (x[2i], x[2i+1])
    window: int = 0  # a sliding window: a query at p sees the keys p - window + 1 .. p (0: 0 .. p)
    softcap: float = 0.0  # scores soft-capped at this, c * tanh(s / c) (0: not)
    scale: float = 0.0  # the queries' scale (0: 1 / sqrt(head_dim))

    def __post_init__(self):
        if min(self.n_head, self.n_head_kv, self.head_dim, self.capacity) < 1:
            raise ValueError(f"attention sizes must be positive: {self}")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"{self.n_head} attention heads do not split into {self.n_head_kv} KV groups")
        if self.n_rot % 2 or not 0 <= self.n_rot <= self.head_dim:
            raise ValueError(f"RoPE dimensions {self.n_rot}: must be even and at most head_dim {self.head_dim}")
        if self.capacity > MAX_KV_CAPACITY:
            raise ValueError(f"a KV cache of {self.capacity} positions: at most {MAX_KV_CAPACITY}")
        if not isinstance(self.window, int) or self.window < 0 or not self.softcap >= 0 or not self.scale >= 0:
            raise ValueError(f"attention window {self.window!r}, soft-cap {self.softcap!r} and scale {self.scale!r}: "
                             "a window of 0 or more positions, a cap and a scale of 0 (none, the default) or more")

    @property
    def query_scale(self) -> float:
        return self.scale or 1.0 / np.sqrt(self.head_dim)

    def push_tail(self) -> list[int]:
        """The shaders' last push constants: the window, the soft-cap's float32 bits."""
        return [self.window, _f32_bits(self.softcap)]

    @property
    def cache_size(self) -> int:
        """Elements of one layer's K (or V) cache: (n_head_kv, capacity, head_dim)."""
        return self.n_head_kv * self.capacity * self.head_dim


def rope_table(inv_freq: np.ndarray, capacity: int, mscale: float = 1.0) -> np.ndarray:
    """(capacity, n_rot/2, 2) float32 (cos, sin) of pos * inv_freq[i], each
    times mscale (ggml's attn_factor: {arch}.rope.scaling.attn_factor),
    computed in float64 and rounded once, as the numpy reference computes them."""
    ang = np.arange(capacity, dtype=np.float64)[:, None] * np.asarray(inv_freq, np.float64)[None, :]
    return (mscale * np.stack([np.cos(ang), np.sin(ang)], axis=-1)).astype(np.float32)


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


def check_sinks(op: str, shape: AttentionShape, sinks) -> None:
    """Attention sinks, where given: a float32 tensor of a value per query head."""
    if sinks is not None and (sinks.dtype != np.float32 or _size(sinks) < shape.n_head):
        raise ValueError(f"{op}: sinks must be float32, one per query head ({shape.n_head}), got {sinks!r}")


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
    pos[i] (shape.window: the window's last positions only; shape.scale
    for 1 / sqrt(head_dim); shape.softcap: the scores soft-capped; sinks: a
    float32 tensor of a logit per query head that joins each head's softmax
    denominator, gpt-oss's). q, k, v: the new vectors, unrotated (parts of the stacked Q/K/V
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
                 n: int = 1, heads: int | None = None, spread: bool = True, fold: bool = False, sinks=None):
        super().__init__(device)
        check_sinks("Attention", shape, sinks)
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
        self.reads = (q.tensor, k.tensor, v.tensor, k_cache, v_cache, table, pos) + ((sinks,) if sinks else ())
        self.writes = (k_cache, v_cache, scores, out.tensor) + ((xq_t,) if xq else ())
        self.quantized = (out.tensor, xq_t, planes) if xq else None
        push = [q.offset, k.offset, v.offset, out.offset, s.n_head, s.n_head_kv, s.head_dim, s.n_rot, s.capacity,
                _f32_bits(s.query_scale), q.step, k.step, v.step, out.step, xq_stride,
                attention_scratch_size(device, s, split)] + s.push_tail()
        # (without sinks, out's tensor fills their binding: the shader reads it only under SINKS)
        tensors = [q.tensor, k.tensor, v.tensor, k_cache, v_cache, table, pos, scores, out.tensor, xq_t,
                   out.tensor if sinks is None else sinks]
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
                                                  crows if combine or folded else 1, int(sinks is not None)], push,
                           depth)

        if n > 1:
            dispatch((s.n_head_kv, 1, n), False, 1)
        dispatch((s.n_head // heads, _groups(n_split, 1), n), False, attend, self.folded)
        if split and not self.folded:
            dispatch((s.n_head, 1, n), True, attend)
