#version 450
// Causal grouped-query attention of a prompt's chunk of n queries over the
// KV cache, tiled: a workgroup takes BQ consecutive queries of the chunk and
// HEADS query heads of one K/V head (HEADS divides G = n_head / n_head_kv:
// workgroup x is g * (G / HEADS) + b, heads g*G + b*HEADS ...), and walks
// the keys in tiles of BKV positions, so that each key and value it loads
// serves its BQ * HEADS rows (a row: one query's one head). The chunk's keys
// and values are in the caches already (shaders/attention.comp's PASS 1,
// recorded before this by vkq.llama.chunk_attention.TiledAttention).
//
// An invocation takes LANE_HEADS heads of LANE_QUERIES queries (rows r = a *
// LANE_HEADS + b: query lane % QS + a * QS of the tile, QS = BQ /
// LANE_QUERIES, head b of its group of heads), so that each key and value it
// reads serves that many rows too (a CPU driver's invocation loads what it
// reads for itself; a GPU's share the tiles in shared memory). Invocations
// past the rows, or rows past the chunk's last query, compute a copy of
// another and write nothing. A row keeps its rotated query and its
// accumulator (head_dim values each) in registers and an online softmax over
// the tiles (running max m, sum l):
//   for each tile T of keys t <= pos (with a sliding window, `window` > 0,
//   only t > pos - window):  s_t = (q . k_t) * scale (soft-capped where
//   `softcap` > 0, soft_cap.glsl),
//     m' = max(m, max_T s_t),  l = l e^(m - m') + sum_T e^(s_t - m'),
//     acc = acc e^(m - m') + sum_T e^(s_t - m') v_t,  m = m'
//   out = acc / l.
// The tiles are aligned to absolute positions (0, BKV, 2 BKV, ...), a tile's
// keys are taken in position order, keys past pos are skipped (not weighted
// by 0: the cache holds anything there), and a tile wholly past pos, or
// wholly before a window's first position, changes nothing (alpha is
// exactly 1; before a row's first key m stays -inf and alpha is taken as
// 1, not exp(-inf + inf)); so the walk may start at the tile of the
// workgroup's first seen position. So a row's arithmetic is fixed by its
// position, the cache and BKV: the same bits whichever chunk, chunk size,
// place in the tile or invocation its query came in (tests check it).
//
// SHARED_KV (GPUs): the workgroup copies each K and V tile into shared
// memory, then every row reads it there (one address for every invocation:
// a broadcast). Without (CPU drivers), every invocation reads the tile from
// the caches, with no barrier (a barrier costs lavapipe more than the loads;
// it reads shared memory lane by lane where addresses differ).
// ROW_LANES > 1 (GPUs, with SHARED_KV; a row per lane group): ROW_LANES
// invocations take a row together, so that none holds a whole head's query
// and accumulator (a GPU's registers: 256 floats at head_dim 128 spilled).
// The rotated queries go to shared memory; invocation d of a row computes
// the scores of the tile's keys d, d + ROW_LANES, ... (each dot product
// whole, in the one order: the same bits) into shared memory, then every
// invocation of the row reads all of its scores, keeps the same running
// max and sum, and accumulates the head's vec4s d, d + ROW_LANES, ... The
// shared tiles' keys and queries are HD4 + 1 vec4s apart (no two rows or
// keys read at once in one bank).
// TEXEL_KV (a define; CPU drivers, whole-vec4 heads): the caches' vec4s are
// read through uniform texel buffer views (bindings 7, 8: u32x4 texels of
// the caches' buffers), not as storage buffers: lavapipe runs a storage
// load as a loop over the lanes with a bounds check per value, a texel
// fetch as one gather (a 512-token chunk at SmolLM2's shape took half the
// time). The same values: the same bits.
//
// head_dim and n_rot are specialization constants (HEAD_DIM, at most
// MAX_HEAD_DIM; N_ROT), so that the loops over a head's values have constant
// trip counts and are unrolled ([[unroll]]), and the query's RoPE indexes its
// registers by constants: lavapipe counts every iteration of a loop that
// remains against its budget of 65535 per invocation. What remains: the loop
// over the tiles and, in each, two over its keys (scores, then values):
// vkq.llama.chunk_attention.tiled_attention_loop_iterations. The loops over
// a tile's keys stay loops: unrolled too, lavapipe took minutes to compile
// the shader (16 keys x 32 vec4s at head_dim 128).
//
// RoPE of the queries as shaders/attention.comp's (ggml's normal mode, or
// NEOX), from the same (capacity, n_rot/2) table of (cos, sin); a score's
// sum runs in attention.comp's order.
//
// Bindings: 0 q (unrotated), 1 K cache, 2 V cache, 3 RoPE table, 4 pos, 5 out,
// 6 partials (SPLIT), 7 and 8 the K and V caches as texels (TEXEL_KV), 9 sinks (SINKS).
// The caches are (n_head_kv, capacity, head_dim).

#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint HEADS = 1;  // query heads per workgroup
layout(constant_id = 3) const uint BQ = 8;  // queries per workgroup
layout(constant_id = 4) const uint BKV = 16;  // keys per tile
layout(constant_id = 5) const bool NEOX = false;
layout(constant_id = 6) const bool SHARED_KV = false;
layout(constant_id = 7) const uint N_ROT = 64;  // RoPE's dimensions of a head (even, at most HEAD_DIM)
layout(constant_id = 8) const uint LANE_HEADS = 1;  // query heads per invocation (a divisor of HEADS)
layout(constant_id = 9) const uint LANE_QUERIES = 1;  // queries per invocation (a divisor of BQ)
// q's and out's heads are whole vec4s (their offsets, strides and head_dim
// multiples of 4: the host knows): a vec4 load or store, not four.
layout(constant_id = 10) const bool VEC4_IO = false;
// Long contexts under a loop budget: workgroup z = c takes the keys c*SPLIT
// .. c*SPLIT + SPLIT - 1 only (SPLIT a multiple of BKV; 0: all), and writes
// each row's m, l and unnormalized acc to the partials; a second dispatch
// (COMBINE, an invocation per row) adds them up: out = sum_c e_c acc_c /
// sum_c e_c l_c, e_c = exp(m_c - max m), in split order.
layout(constant_id = 11) const uint SPLIT = 0;
layout(constant_id = 12) const bool COMBINE = false;
layout(constant_id = 13) const uint ROW_LANES = 1;  // invocations per row (> 1: SHARED_KV, LANE_ROWS 1)
// A sink per query head (binding 9, gpt-oss's): a logit that joins each
// row's softmax denominator: the online softmax starts from it (m = sink,
// l = 1), or with SPLIT the combine takes it.
layout(constant_id = 14) const bool SINKS = false;

const uint WG_SIZE = gl_WorkGroupSize.x;
const uint HD4 = (HEAD_DIM + 3u) / 4u;  // vec4s of a head, zero past HEAD_DIM
const bool ALIGNED = HEAD_DIM % 4u == 0u;  // a cached head is whole vec4s
const bool SPREAD = ROW_LANES > 1u;  // a row over ROW_LANES invocations (LANE_ROWS is 1 then)
const uint KS = SPREAD ? HD4 + 1u : HD4;  // vec4s from one key's (or query's) head to the next in shared memory
const uint KV_TILE = SHARED_KV ? BKV * KS : 1u;
const uint LANE_ROWS = LANE_QUERIES * LANE_HEADS;
const uint LANES = BQ * HEADS / LANE_ROWS;  // invocation groups with rows (WG_SIZE / ROW_LANES may be more)
const uint AV = (HD4 + ROW_LANES - 1u) / ROW_LANES;  // accumulator vec4s of a row per invocation
const uint KPL = BKV / ROW_LANES;  // a tile's keys an invocation scores (SPREAD: ROW_LANES divides BKV)

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 0) readonly buffer Q4 { vec4 q4[]; };
layout(std430, binding = 1) readonly buffer KCache { float k_cache[]; };
layout(std430, binding = 2) readonly buffer VCache { float v_cache[]; };
#ifdef TEXEL_KV
layout(binding = 7) uniform usamplerBuffer k_texels;
layout(binding = 8) uniform usamplerBuffer v_texels;
vec4 key4(uint i) { return uintBitsToFloat(texelFetch(k_texels, int(i))); }
vec4 value4(uint i) { return uintBitsToFloat(texelFetch(v_texels, int(i))); }
#else
layout(std430, binding = 1) readonly buffer KCache4 { vec4 k_cache4[]; };
layout(std430, binding = 2) readonly buffer VCache4 { vec4 v_cache4[]; };
vec4 key4(uint i) { return k_cache4[i]; }
vec4 value4(uint i) { return v_cache4[i]; }
#endif
layout(std430, binding = 3) readonly restrict buffer Table { vec2 cos_sin[]; };
layout(std430, binding = 4) readonly restrict buffer Pos { int pos[]; };
layout(std430, binding = 5) writeonly buffer Out { float o[]; };
layout(std430, binding = 5) writeonly buffer Out4 { vec4 o4[]; };
// (query, head, split): m, l, then HEAD_DIM values of acc (SPLIT only).
layout(std430, binding = 6) restrict buffer Partials { float part[]; };
layout(std430, binding = 9) readonly restrict buffer Sinks { float sinks[]; };

layout(push_constant) uniform Params {
    uint q_off, q_step, out_off, out_step;  // first value of the vectors in their tensors, floats between them
    uint n;  // queries in the chunk
    uint n_split;  // splits of the capacity (SPLIT)
    uint n_head, n_head_kv;
    uint capacity;  // positions the caches hold
    float scale;  // the queries' scale (1 / sqrt(head_dim), or the architecture's)
    uint window;  // a sliding window's positions (0: every position up to the query's)
    float softcap;  // scores soft-capped at this (0: not)
} p;

#include "soft_cap.glsl"

// Whether a query at `position` sees the key at t.
bool seen(uint t, uint position) {
    return t <= position && (p.window == 0u || t + p.window > position);
}

shared vec4 k_tile[KV_TILE];
shared vec4 v_tile[KV_TILE];
// SPREAD: the rows' rotated queries, and their scores of the tile's keys.
shared vec4 q_tile[SPREAD ? LANES * KS : 1u];
shared float s_tile[SPREAD ? LANES * BKV : 1u];

// Values 4i .. 4i+3 of the cached head at element `base` (0 past HEAD_DIM).
vec4 cached_key(uint base, uint i) {
    if (ALIGNED) {
        return key4(base / 4u + i);
    }
    vec4 x = vec4(0.0);
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        if (4u * i + c < HEAD_DIM) {
            x[c] = k_cache[base + 4u * i + c];
        }
    }
    return x;
}

vec4 cached_value(uint base, uint i) {
    if (ALIGNED) {
        return value4(base / 4u + i);
    }
    vec4 x = vec4(0.0);
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        if (4u * i + c < HEAD_DIM) {
            x[c] = v_cache[base + 4u * i + c];
        }
    }
    return x;
}

// Head `qb`'s query rotated for position `at` into x[0 .. HD4-1] (zero past
// HEAD_DIM): attention.comp's rope of each pair, written in its order. The
// loops are unrolled and N_ROT is a constant: every index is known when the
// shader is specialized, so x stays in registers.
void rotated_query(uint qb, uint at, inout vec4 x[HD4]) {
    vec4 raw[HD4];
    [[unroll]] for (uint i = 0u; i < HD4; i++) {
        if (VEC4_IO) {
            raw[i] = q4[qb / 4u + i];
        } else {
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                raw[i][c] = 4u * i + c < HEAD_DIM ? q[qb + 4u * i + c] : 0.0;
            }
        }
    }
    const uint half_rot = N_ROT / 2u;
    [[unroll]] for (uint d = 0u; d < 4u * HD4; d++) {
        float y = raw[d / 4u][d % 4u];
        if (d < N_ROT) {
            const uint j = NEOX ? d % half_rot : d / 2u;
            const uint first = NEOX ? j : 2u * j;
            const uint second = NEOX ? j + half_rot : first + 1u;
            const vec2 xy = vec2(raw[first / 4u][first % 4u], raw[second / 4u][second % 4u]);
            const vec2 cs = cos_sin[at * half_rot + j];
            y = d == first ? xy.x * cs.x - xy.y * cs.y : xy.x * cs.y + xy.y * cs.x;
        }
        x[d / 4u][d % 4u] = y;
    }
}

// Values 4i .. 4i+3 of rotated_query's x, alone (SPREAD: an invocation
// rotates the vec4s it stores): the same arithmetic on the same values.
vec4 rotated_query4(uint qb, uint at, uint i) {
    const uint half_rot = N_ROT / 2u;
    vec4 y;
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        const uint d = 4u * i + c;
        y[c] = d < HEAD_DIM ? q[qb + d] : 0.0;
        if (d < N_ROT) {
            const uint j = NEOX ? d % half_rot : d / 2u;
            const uint first = NEOX ? j : 2u * j;
            const uint second = NEOX ? j + half_rot : first + 1u;
            const vec2 xy = vec2(q[qb + first], q[qb + second]);
            const vec2 cs = cos_sin[at * half_rot + j];
            y[c] = d == first ? xy.x * cs.x - xy.y * cs.y : xy.x * cs.y + xy.y * cs.x;
        }
    }
    return y;
}

// First value of the partial result of query qi, head h, split c.
uint partial(uint qi, uint h, uint c) {
    return ((qi * p.n_head + h) * p.n_split + c) * (HEAD_DIM + 2u);
}

// COMBINE: invocation gl_GlobalInvocationID.x takes row (query, head) = (x / n_head, x % n_head).
void combine_splits() {
    const uint row = gl_GlobalInvocationID.x;
    if (row >= p.n * p.n_head) {
        return;
    }
    const uint qi = row / p.n_head;
    const uint h = row % p.n_head;
    const uint used = uint(pos[qi]) / SPLIT + 1u;
    float m = SINKS ? sinks[h] : -1.0 / 0.0;
    for (uint c = 0u; c < used; c++) {
        m = max(m, part[partial(qi, h, c)]);
    }
    float l = SINKS ? exp(sinks[h] - m) : 0.0;
    vec4 acc[HD4];
    [[unroll]] for (uint i = 0u; i < HD4; i++) {
        acc[i] = vec4(0.0);
    }
    for (uint c = 0u; c < used; c++) {
        const uint pb = partial(qi, h, c);
        const float e = exp(part[pb] - m);
        l += e * part[pb + 1u];
        [[unroll]] for (uint i = 0u; i < HD4; i++) {
            [[unroll]] for (uint k = 0u; k < 4u; k++) {
                if (4u * i + k < HEAD_DIM) {
                    acc[i][k] += e * part[pb + 2u + 4u * i + k];
                }
            }
        }
    }
    const float inv_l = 1.0 / l;
    const uint ob = p.out_off + qi * p.out_step + h * HEAD_DIM;
    [[unroll]] for (uint i = 0u; i < HD4; i++) {
        const vec4 y = acc[i] * inv_l;
        if (VEC4_IO) {
            o4[ob / 4u + i] = y;
        } else {
            [[unroll]] for (uint k = 0u; k < 4u; k++) {
                if (4u * i + k < HEAD_DIM) {
                    o[ob + 4u * i + k] = y[k];
                }
            }
        }
    }
}

void main() {
    if (COMBINE) {
        combine_splits();
        return;
    }
    const uint tid = gl_LocalInvocationID.x;
    const uint group_size = p.n_head / p.n_head_kv;
    const uint g = gl_WorkGroupID.x / (group_size / HEADS);
    const uint h0 = g * group_size + gl_WorkGroupID.x % (group_size / HEADS) * HEADS;
    const uint q0 = gl_WorkGroupID.y * BQ;  // the tile's first query in the chunk
    const uint lane = min(tid / ROW_LANES, LANES - 1u);
    const uint d = tid % ROW_LANES;  // the invocation's place in its row's group (SPREAD)
    // The invocation's rows r = a * LANE_HEADS + b: query q0 + lane % QS + a * QS of the tile, head hl + b.
    const uint QS = BQ / LANE_QUERIES;
    const uint hl = h0 + lane / QS * LANE_HEADS;
    uint qi[LANE_QUERIES];
    uint position[LANE_QUERIES];
    [[unroll]] for (uint a = 0u; a < LANE_QUERIES; a++) {
        qi[a] = min(q0 + lane % QS + a * QS, p.n - 1u);
        position[a] = uint(pos[qi[a]]);
    }
    uint last = 0u;  // the largest position of the tile's queries: every invocation walks its keys
    uint least = 0xFFFFFFFFu;  // ... and the smallest
    [[unroll]] for (uint j = 0u; j < BQ; j++) {
        last = max(last, uint(pos[min(q0 + j, p.n - 1u)]));
        least = min(least, uint(pos[min(q0 + j, p.n - 1u)]));
    }
    // The first key any of them sees, at its tile's start (a sliding window's).
    const uint first = p.window > 0u && least >= p.window ? (least + 1u - p.window) / BKV * BKV : 0u;
    const uint kv0 = g * p.capacity * HEAD_DIM;

    // Head hl + r's query at qv[r * HD4 ...] (SPREAD: q_tile[lane * KS ...]),
    // its accumulator's vec4s d, d + ROW_LANES, ... at acc[r * AV ...].
    vec4 qv[SPREAD ? 1u : LANE_ROWS * HD4];
    vec4 acc[LANE_ROWS * AV];
    float m[LANE_ROWS];
    float l[LANE_ROWS];
    [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
        const uint a = r / LANE_HEADS;
        const uint qb = p.q_off + qi[a] * p.q_step + (hl + r % LANE_HEADS) * HEAD_DIM;
        if (SPREAD) {
            [[unroll]] for (uint j = 0u; j < AV; j++) {
                const uint i = j * ROW_LANES + d;
                if (i < HD4) {
                    q_tile[lane * KS + i] = rotated_query4(qb, position[a], i);
                }
            }
        } else {
            vec4 x[HD4];
            rotated_query(qb, position[a], x);
            [[unroll]] for (uint i = 0u; i < HD4; i++) {
                qv[r * HD4 + i] = x[i];
            }
        }
        [[unroll]] for (uint j = 0u; j < AV; j++) {
            acc[r * AV + j] = vec4(0.0);
        }
        const bool sink = SINKS && SPLIT == 0u;
        m[r] = sink ? sinks[hl + r % LANE_HEADS] : -1.0 / 0.0;
        l[r] = sink ? 1.0 : 0.0;
    }

    // The workgroup's keys: t_begin .. t_end - 1 (its split's, to the tile's last position).
    // (a split's workgroups all run, however far before the window: COMBINE reads every split)
    const uint t_begin = SPLIT > 0u ? gl_WorkGroupID.z * SPLIT : first;
    const uint t_end = SPLIT > 0u ? min(last + 1u, t_begin + SPLIT) : last + 1u;
    if (t_begin >= t_end) {
        return;  // (the whole workgroup: no row's position reaches this split, and COMBINE reads none of it)
    }
    for (uint t0 = t_begin; t0 < t_end; t0 += BKV) {
        if (SHARED_KV) {
            [[unroll]] for (uint it = 0u; it < (BKV * HD4 + WG_SIZE - 1u) / WG_SIZE; it++) {
                const uint e = it * WG_SIZE + tid;
                if (e < BKV * HD4) {
                    // (past the capacity: any cached key; the rows skip it)
                    const uint base = kv0 + min(t0 + e / HD4, p.capacity - 1u) * HEAD_DIM;
                    k_tile[e / HD4 * KS + e % HD4] = cached_key(base, e % HD4);
                    v_tile[e / HD4 * KS + e % HD4] = cached_value(base, e % HD4);
                }
            }
            barrier();  // (SPREAD: the queries' stores too, before the first tile)
        }
        // Keys t0 .. t0 + n_t - 1, the same for every invocation; the row
        // takes those up to its position. A tile wholly past it changes
        // nothing: m stays, alpha is 1 (exactly), nothing is added.
        const uint n_t = min(BKV, t_end - t0);
        float s[SPREAD ? 1u : LANE_ROWS * BKV];
        float mt[LANE_ROWS];
        [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
            mt[r] = -1.0 / 0.0;
        }
        if (SPREAD) {
            // This invocation's keys d, d + ROW_LANES, ...: their scores to s_tile.
            float dot[KPL];
            [[unroll]] for (uint j = 0u; j < KPL; j++) {
                dot[j] = 0.0;
            }
            [[unroll]] for (uint i = 0u; i < HD4; i++) {
                const vec4 qq = q_tile[lane * KS + i];
                [[unroll]] for (uint j = 0u; j < KPL; j++) {
                    const vec4 kk = k_tile[(j * ROW_LANES + d) * KS + i];
                    dot[j] += qq.x * kk.x;
                    dot[j] += qq.y * kk.y;
                    dot[j] += qq.z * kk.z;
                    dot[j] += qq.w * kk.w;
                }
            }
            [[unroll]] for (uint j = 0u; j < KPL; j++) {
                const float st = dot[j] * p.scale;
                s_tile[lane * BKV + j * ROW_LANES + d] = p.softcap > 0.0 ? soft_cap(st, p.softcap) : st;
            }
            barrier();
            for (uint t = 0u; t < n_t; t++) {
                if (seen(t0 + t, position[0])) {
                    mt[0] = max(mt[0], s_tile[lane * BKV + t]);
                }
            }
        } else {
            for (uint t = 0u; t < n_t; t++) {
                const uint base = kv0 + (t0 + t) * HEAD_DIM;
                float dot[LANE_ROWS];
                [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
                    dot[r] = 0.0;
                }
                [[unroll]] for (uint i = 0u; i < HD4; i++) {
                    const vec4 kk = SHARED_KV ? k_tile[t * KS + i] : cached_key(base, i);
                    [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
                        dot[r] += qv[r * HD4 + i].x * kk.x;
                        dot[r] += qv[r * HD4 + i].y * kk.y;
                        dot[r] += qv[r * HD4 + i].z * kk.z;
                        dot[r] += qv[r * HD4 + i].w * kk.w;
                    }
                }
                [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
                    const float st = dot[r] * p.scale;
                    s[r * BKV + t] = p.softcap > 0.0 ? soft_cap(st, p.softcap) : st;
                    if (seen(t0 + t, position[r / LANE_HEADS])) {
                        mt[r] = max(mt[r], s[r * BKV + t]);
                    }
                }
            }
        }
        [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
            const float m_new = max(m[r], mt[r]);
            const float alpha = m_new == -1.0 / 0.0 ? 1.0 : exp(m[r] - m_new);
            l[r] *= alpha;
            [[unroll]] for (uint j = 0u; j < AV; j++) {
                acc[r * AV + j] *= alpha;
            }
            m[r] = m_new;
        }
        for (uint t = 0u; t < n_t; t++) {
            // (a key past a row's position is skipped, not weighted by 0: it may be anything)
            const uint base = kv0 + (t0 + t) * HEAD_DIM;
            float e[LANE_ROWS];
            [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
                e[r] = 0.0;
                if (seen(t0 + t, position[r / LANE_HEADS])) {
                    if (SPREAD) {
                        e[r] = exp(s_tile[lane * BKV + t] - m[r]);
                    } else {
                        e[r] = exp(s[r * BKV + t] - m[r]);
                    }
                    l[r] += e[r];
                }
            }
            [[unroll]] for (uint j = 0u; j < AV; j++) {
                // (SPREAD: a vec4 past the head, where ROW_LANES does not divide HD4, adds the last one to a
                // slot never written out)
                const uint i = SPREAD ? min(j * ROW_LANES + d, HD4 - 1u) : j;
                const vec4 vv = SHARED_KV ? v_tile[t * KS + i] : cached_value(base, i);
                [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
                    // (a select, not a branch: cheaper to compile and to run)
                    const vec4 sum = acc[r * AV + j] + e[r] * vv;
                    acc[r * AV + j] = seen(t0 + t, position[r / LANE_HEADS]) ? sum : acc[r * AV + j];
                }
            }
        }
        if (SHARED_KV) {
            barrier();  // the tiles are overwritten next
        }
    }

    [[unroll]] for (uint r = 0u; r < LANE_ROWS; r++) {
        const uint a = r / LANE_HEADS;
        const bool mine = tid < LANES * ROW_LANES && q0 + lane % QS + a * QS < p.n;
        if (SPLIT > 0u && mine) {
            const uint pb = partial(qi[a], hl + r % LANE_HEADS, gl_WorkGroupID.z);
            if (d == 0u) {
                part[pb] = m[r];
                part[pb + 1u] = l[r];
            }
            [[unroll]] for (uint j = 0u; j < AV; j++) {
                const uint i = SPREAD ? j * ROW_LANES + d : j;
                [[unroll]] for (uint k = 0u; k < 4u; k++) {
                    if (4u * i + k < HEAD_DIM) {
                        part[pb + 2u + 4u * i + k] = acc[r * AV + j][k];
                    }
                }
            }
        } else if (mine) {
            const float inv_l = 1.0 / l[r];
            const uint ob = p.out_off + qi[a] * p.out_step + (hl + r % LANE_HEADS) * HEAD_DIM;
            [[unroll]] for (uint j = 0u; j < AV; j++) {
                const uint i = SPREAD ? j * ROW_LANES + d : j;
                const vec4 y = acc[r * AV + j] * inv_l;
                if (VEC4_IO) {
                    if (i < HD4) {
                        o4[ob / 4u + i] = y;
                    }
                } else {
                    [[unroll]] for (uint c = 0u; c < 4u; c++) {
                        if (4u * i + c < HEAD_DIM) {
                            o[ob + 4u * i + c] = y[c];
                        }
                    }
                }
            }
        }
    }
}
