#version 450
// One attention step of a llama layer, for the query vector at position
// pos[0] (a decode step): RoPE of q and of the new key, the new key and
// value appended to the KV cache, then grouped-query attention over the
// cache (float32), causal.
//
// A chunk of n tokens of a prompt (PASS, specialization constant 4): pass 1
// appends every token's rotated key and value to the caches at pos[i]
// (workgroup (kv head, 1, i)); pass 2 attends for every query i over
// positions 0 .. pos[i], all read from the caches (workgroup (heads, split,
// i)). A query's arithmetic is then the decode step's at its position, in
// the same order (the new key and value it takes from k, v and shared
// memory are the values stored in the caches), so a prompt in chunks gives
// the logits of one fed token by token, bit for bit.
//
// Query head h reads K/V head g = h / G, G = n_head / n_head_kv, as ggml
// broadcasts:
//   s_t = (q . k_t) * scale;  p_t = exp(s_t - max s) / sum exp;  out = sum p_t v_t
// over the positions t <= pos; with a sliding window (push constant
// `window` > 0) only t > pos - window; with `softcap` > 0, each s_t
// soft-capped first (soft_cap.glsl); with SINKS (specialization constant
// 12), head h's sink (binding 10, a logit per query head, gpt-oss's) joins
// the denominator: max s and sum exp over the scores and the sink, once per
// head (with SPLIT, in the combine).
// A workgroup takes HEADS query heads of one K/V head (HEADS divides G:
// workgroup x is g * (G / HEADS) + b, heads g*G + b*HEADS ...), so that
// each key and value it loads serves them all; each head's sums run in the
// order one head alone would take.
//
// RoPE is ggml's "normal" mode: adjacent pairs (x[2i], x[2i+1]) of a head
// rotate by angle pos * theta_i for 2i < n_rot; the rest of the head is left
// as it is. With NEOX (specialization constant 6), ggml's "neox" mode (Qwen):
// the pairs are (x[i], x[i + n_rot/2]) instead. cos and sin come from a table (capacity, n_rot/2) of (cos, sin),
// computed by the host in float64 (base, linear scaling, frequency factors):
// exact, and no GPU sin/cos of large angles.
//
// The group's first workgroup of the split that holds the position writes
// the new key and value into the caches at the position; every head takes that position's key and value from k and v
// themselves, so no workgroup reads a cache entry another one is writing, and
// RoPE, the cache append and the attention are one dispatch. The caches are
// (n_head_kv, capacity, head_dim): a head's keys are contiguous. The scores
// live in a scratch buffer (n_head, capacity): any context length fits, where
// shared memory would cap it. (With SPLIT, the partial results follow them:
// (n_head, splits, head_dim + 2).)
//
// Long contexts (SPLIT, specialization constant 2, > 0): workgroup (heads, c)
// takes positions c*SPLIT .. c*SPLIT + SPLIT - 1 only, and writes its partial
// result to the scratch after the scores: its max score m_c, its sum of
// exp(s - m_c), and its unnormalized weighted sum of the values. A second
// dispatch of this shader (COMBINE, specialization constant 3), one
// workgroup per head, rescales and adds them (exp(m_c - max m)) into out.
// With FOLD (specialization constant 9) there is no second dispatch: each
// split workgroup, its partial results written, draws a ticket from its
// (head group, query)'s counter in the scratch, and the one that draws the
// last runs the combine of its heads itself, then sets the counter back to
// 0 for the next dispatch (the scratch starts at zeros). It takes the
// COMBINE dispatch's workgroup of COMBINE_WG invocations (specialization
// constant 10) and its COMBINE_ROWS (11) as segments of its own wider
// workgroup, a head each, with the same reductions over the same
// segment-local invocations (the host folds only where COMBINE_WG divides
// the workgroup): the same order of every sum, so the same bits as the
// COMBINE dispatch's (reduce.glsl: segment_reduce).
// A partial result is a record of 4 + head_dim (to a whole vec4) floats:
// m_c, l_c, two unused, then the sums, records from the first multiple of
// 4 after the scores, so that its sums are whole vec4s.
// Why: llvmpipe ends an invocation's loops after 65535 iterations in all,
// silently, and one workgroup per head takes about (2*head_dim/WG_SIZE + 1)
// iterations per position (16 per position at head_dim 64 on its 8-wide
// subgroups: wrong past ~4000 positions). The host picks SPLIT from that
// budget there; on a GPU, from its compute units, so that a short context
// still spreads over the device (vkq/llama/vector_ops/attention.py: attention_split);
// elsewhere SPLIT is 0 and a head is one workgroup.
// Splits past the position, or before a sliding window's first position,
// have nothing to do and return at once; the combine and the fold's
// tickets count the splits from the window's first.
//
// On a GPU, a head's positions split over workgroups or not (a short
// context), each loop that reads the caches spreads over the workgroup so
// that one invocation takes only a few dependent loads
// (vkq/llama/vector_ops/attention.py: attention_launch):
// KEY_LANES (specialization constant 7) invocations score one position
// together, each a part of the key's vec4s, their parts then added in a
// fixed tree in shared memory; VALUE_ROWS (8) rows of invocations take the
// weighted sum, row r the split's positions t0 + r, t0 + r + VALUE_ROWS, ...,
// their sums added in a fixed tree over the rows; the COMBINE pass takes
// the splits so, over its COMBINE_ROWS rows. 1 and 1: one invocation scores a
// position and one sums a vec4 over all of them (a CPU driver's launches).
// Every order is fixed by the launch, so a chunk's queries and a decode
// step's take the same one.
//
// With X_PLANES (specialization constant 1) of 1 or 2, out is also written
// as Q8_1 blocks (q8_1.glsl) to xq, the int8 mat-vec path's input: each head's
// head_dim values (a multiple of 32: the host checks) are whole blocks, read
// back by the workgroup that wrote them (the COMBINE pass's, with SPLIT).
//
// Bindings: 0 q, 1 k, 2 v (the new vectors, unrotated), 3 K cache, 4 V cache,
// 5 RoPE table, 6 pos, 7 scores (scratch: per query the scores, the partial
// results, then the fold's counters, one per head group), 8 out, 9 xq,
// 10 sinks (SINKS).
// Variants: REDUCE_SUBGROUP (reduce.glsl).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint X_PLANES = 0;
layout(constant_id = 2) const uint SPLIT = 0;  // positions per workgroup; 0: all of them
layout(constant_id = 3) const bool COMBINE = false;
layout(constant_id = 4) const uint PASS = 0;  // 0: a decode step; 1, 2: a chunk's append and attend
// Query heads per workgroup: a divisor of n_head / n_head_kv (the host's
// attention_heads), a constant so that their loops unroll into registers.
layout(constant_id = 5) const uint HEADS = 1;
layout(constant_id = 6) const bool NEOX = false;
// Invocations per position's score, and rows of the weighted sum (see above):
// powers of two that divide the workgroup (the host picks them).
layout(constant_id = 7) const uint KEY_LANES = 1;
layout(constant_id = 8) const uint VALUE_ROWS = 1;
layout(constant_id = 9) const bool FOLD = false;
// The combine's workgroup and rows of splits (COMBINE and FOLD): powers of
// two, COMBINE_ROWS dividing COMBINE_WG, COMBINE_WG dividing the workgroup.
layout(constant_id = 10) const uint COMBINE_WG = 1;
layout(constant_id = 11) const uint COMBINE_ROWS = 1;
layout(constant_id = 12) const bool SINKS = false;

layout(std430, binding = 0) readonly restrict buffer Q { float q[]; };
layout(std430, binding = 1) readonly restrict buffer K { float k[]; };
layout(std430, binding = 2) readonly restrict buffer V { float v[]; };
layout(std430, binding = 3) buffer KCache { float k_cache[]; };
layout(std430, binding = 4) buffer VCache { float v_cache[]; };
// The caches again, four values at a time (float4.glsl): with head_dim a
// multiple of 4 a head's keys and values are whole vec4s.
layout(std430, binding = 3) readonly buffer KCache4 { vec4 k_cache4[]; };
layout(std430, binding = 4) readonly buffer VCache4 { vec4 v_cache4[]; };
layout(std430, binding = 5) readonly restrict buffer Table { vec2 cos_sin[]; };
layout(std430, binding = 6) readonly restrict buffer Pos { int pos[]; };
layout(std430, binding = 7) buffer Scores { float scores[]; };
// The partial results, and their sums four at a time (their records are
// whole vec4s): coherent, since with FOLD another workgroup of the same
// dispatch reads them; and the fold's counters.
layout(std430, binding = 7) coherent buffer Partials { float partials[]; };
layout(std430, binding = 7) coherent readonly buffer Partials4 { vec4 partials4[]; };
layout(std430, binding = 7) coherent buffer Tickets { uint tickets[]; };
layout(std430, binding = 8) coherent restrict buffer Out { float o[]; };
layout(std430, binding = 9) writeonly restrict buffer XQ { uvec4 xq[]; };
layout(std430, binding = 10) readonly restrict buffer Sinks { float sinks[]; };

layout(push_constant) uniform Params {
    uint q_off, k_off, v_off, out_off;  // first value of each vector in its tensor
    uint n_head, n_head_kv, head_dim, n_rot;
    uint capacity;   // positions the caches hold (the host keeps the positions below it)
    float scale;     // the queries' scale (1 / sqrt(head_dim), or the architecture's)
    uint q_step, k_step, v_step, out_step;  // floats between the vectors of a chunk's tokens
    uint xq_step;    // Q8_1 blocks between them in xq
    uint scratch_step;  // floats of scratch per query (scores, then partial results)
    uint window;     // a sliding window's positions (0: every position up to the query's)
    float softcap;   // scores soft-capped at this (0: not)
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
const uint MAX_HEAD_DIM = 256u;  // the host checks
const uint HD4 = MAX_HEAD_DIM / 4u;
// The rotated queries of the workgroup's heads and the new key, zero past head_dim to a whole vec4.
shared vec4 q_rot[HEADS * HD4];
shared vec4 k_rot[HD4];
// The weighted sums' rows before their tree (VALUE_ROWS > 1).
shared vec4 row_sums[WG_SIZE];
shared bool last_of_splits;  // FOLD: this workgroup drew the last ticket

#include "reduce.glsl"
#include "q8_1.glsl"
#include "float4.glsl"
#include "soft_cap.glsl"

// The first position a query at `position` sees.
uint first_seen(uint position) {
    return p.window > 0u && position >= p.window ? position + 1u - p.window : 0u;
}

// A score as the softmax takes it: q . k scaled, soft-capped where asked.
float score(float dot) {
    const float s = dot * p.scale;
    return p.softcap > 0.0 ? soft_cap(s, p.softcap) : s;
}

// The two values of a head that pair j rotates together (RoPE's mode); past
// n_rot, the pairs of the values left as they are.
uvec2 pair_of(uint j) {
    if (NEOX && 2u * j < p.n_rot) {
        return uvec2(j, j + p.n_rot / 2u);
    }
    return uvec2(2u * j, 2u * j + 1u);
}

// Pair j of a head (pair_of), rotated for position `at`.
vec2 rope(vec2 x, uint j, uint at) {
    if (2u * j >= p.n_rot) {  // n_rot is even (the host checks)
        return x;
    }
    const vec2 cs = cos_sin[at * (p.n_rot / 2u) + j];
    return vec2(x.x * cs.x - x.y * cs.y, x.x * cs.y + x.y * cs.x);
}

FLOAT4_READER(cache_key, k_cache, k_cache4)
FLOAT4_READER(cache_value, v_cache, v_cache4)

// Values 4i .. 4i+3 of the head that starts at element `base` of a cache (0 past head_dim).
vec4 cached_key(uint base, uint i) { return cache_key(base, 4u * i, p.head_dim, p.head_dim % 4u == 0u); }
vec4 cached_value(uint base, uint i) { return cache_value(base, 4u * i, p.head_dim, p.head_dim % 4u == 0u); }

// q_j . k_t of the workgroup's heads j < HEADS, for the key at `base` of
// the K cache, or (cached false) the new key: one order of the sums for
// both, so that a key gives the same score read from either place.
void scores_of(uint base, bool cached, out float s[HEADS]) {
    for (uint j = 0u; j < HEADS; j++) {
        s[j] = 0.0;
    }
    for (uint i = 0u; 4u * i < p.head_dim; i++) {
        const vec4 kk = cached ? cached_key(base, i) : k_rot[i];
        for (uint j = 0u; j < HEADS; j++) {
            const vec4 qq = q_rot[j * HD4 + i];
            s[j] += qq.x * kk.x;
            s[j] += qq.y * kk.y;
            s[j] += qq.z * kk.z;
            s[j] += qq.w * kk.w;
        }
    }
}

// The scratch's partial result of split c of head h for query qi: m, l, two
// unused, then head_dim sums (to a whole vec4); a multiple of 4.
uint partial(uint qi, uint h, uint c, uint n_split) {
    const uint first = (p.n_head * p.capacity + 3u) / 4u * 4u;
    return qi * p.scratch_step + first + (h * n_split + c) * (4u + (p.head_dim + 3u) / 4u * 4u);
}

// The scratch's fold counter of head group b (workgroup x) for query qi, after every partial result.
uint ticket(uint qi, uint b, uint n_split) {
    return partial(qi, p.n_head, 0u, n_split) + b;
}

// The fixed tree over the `rows` rows of row_sums (cols invocations a row,
// this invocation's row `row`; tid indexes row_sums): row 0 gets the sum
// of every row's. Every invocation calls it.
vec4 sum_rows(vec4 x, uint tid, uint row, uint rows, uint cols) {
    if (rows == 1u) {
        return x;
    }
    row_sums[tid] = x;
    barrier();
    for (uint s = rows / 2u; s > 0u; s >>= 1) {
        if (row < s) {
            row_sums[tid] += row_sums[tid + s * cols];
        }
        barrier();
    }
    x = row_sums[tid];
    barrier();  // row_sums is reused by the next call
    return x;
}

// The fixed tree over each position's KEY_LANES invocations (tid's lane 0
// gets their sum), in reduce.glsl's reduce_partial. Every invocation calls it.
float sum_lanes(float x, uint tid) {
    const uint lane = tid % KEY_LANES;
    reduce_partial[tid] = x;
    barrier();
    for (uint s = KEY_LANES / 2u; s > 0u; s >>= 1) {
        if (lane < s) {
            reduce_partial[tid] += reduce_partial[tid + s];
        }
        barrier();
    }
    x = reduce_partial[tid];
    barrier();  // reduce_partial is reused by the next call and the reductions
    return x;
}

// out's head h of query qi (its values already in o) as Q8_1 blocks, when
// asked (and `store`), by `width` invocations, this one `lane` of them.
// Every invocation calls it.
void store_out_q8_1(uint lane, uint width, uint qi, uint h, uint ob, bool store) {
    if (X_PLANES > 0u) {
        memoryBarrierBuffer();
        barrier();
        for (uint b = lane; store && b < p.head_dim / 32u; b += width) {
            vec4 vals[8];
            for (uint j = 0u; j < 8u; j++) {
                for (uint c = 0u; c < 4u; c++) {
                    vals[j][c] = o[ob + 32u * b + 4u * j + c];
                }
            }
            store_q8_1(vals, qi * p.xq_step + (h * p.head_dim) / 32u + b);
        }
    }
}

// The second pass with SPLIT, head h of query qi, by the COMBINE_WG
// invocations from `first` (this one `first + lane`; `has_head` false: a
// segment with no head, which joins the barriers and writes nothing):
// out = sum_c e_c acc_c / sum_c e_c l_c, e_c = exp(m_c - max m). The
// maximum and the denominator over the segment; each vec4 of the sums
// over COMBINE_ROWS rows of invocations, row r the splits r, r +
// COMBINE_ROWS, ..., then sum_rows. Every invocation calls it.
void combine_splits(uint first, uint lane, uint qi, uint h, uint position, bool has_head) {
    const uint n_split = (p.capacity + SPLIT - 1u) / SPLIT;
    const uint used = has_head ? position / SPLIT + 1u : 0u;
    const uint c0 = first_seen(position) / SPLIT;  // (the splits before it returned at once)
    float m = -1.0 / 0.0;
    for (uint c = c0 + lane; c < used; c += COMBINE_WG) {
        m = max(m, partials[partial(qi, h, c, n_split)]);
    }
    m = segment_reduce(m, 1u, first, COMBINE_WG);
    if (SINKS) {
        m = max(m, sinks[h]);
    }
    float l = 0.0;
    for (uint c = c0 + lane; c < used; c += COMBINE_WG) {
        const uint pb = partial(qi, h, c, n_split);
        l += exp(partials[pb] - m) * partials[pb + 1u];
    }
    const float inv_l = 1.0 / (segment_reduce(l, 0u, first, COMBINE_WG) + (SINKS ? exp(sinks[h] - m) : 0.0));
    const uint ob = p.out_off + qi * p.out_step + h * p.head_dim;
    const uint cols = COMBINE_WG / COMBINE_ROWS;
    const uint row = lane / cols;
    const uint vec4s = (p.head_dim + 3u) / 4u;
    for (uint k = 0u; k * cols < vec4s; k++) {  // (uniform: sum_rows has barriers)
        const uint i = k * cols + lane % cols;
        vec4 acc = vec4(0.0);
        if (i < vec4s) {
            for (uint c = c0 + row; c < used; c += COMBINE_ROWS) {
                const uint pb = partial(qi, h, c, n_split);
                acc += exp(partials[pb] - m) * partials4[(pb + 4u) / 4u + i];
            }
        }
        acc = sum_rows(acc, first + lane, row, COMBINE_ROWS, cols);
        if (has_head && row == 0u && i < vec4s) {
            for (uint c = 0u; c < 4u && 4u * i + c < p.head_dim; c++) {
                o[ob + 4u * i + c] = acc[c] * inv_l;
            }
        }
    }
    store_out_q8_1(lane, COMBINE_WG, qi, h, ob, has_head);
}

// FOLD: the combine of the workgroup's HEADS heads from h0, a head per
// segment of COMBINE_WG invocations, as many heads at once as segments.
void combine_heads(uint tid, uint qi, uint h0, uint position) {
    const uint segments = WG_SIZE / COMBINE_WG;
    const uint lane = tid % COMBINE_WG;
    const uint first = tid - lane;
    for (uint j0 = 0u; j0 < HEADS; j0 += segments) {  // (uniform: combine_splits has barriers)
        const uint j = j0 + tid / COMBINE_WG;
        combine_splits(first, lane, qi, h0 + min(j, HEADS - 1u), position, j < HEADS);
    }
}

// Pass 1 of a chunk: KV head g's rotated key and value of query qi into the caches.
void append(uint tid, uint qi, uint g, uint position) {
    const uint kb = p.k_off + qi * p.k_step + g * p.head_dim;
    const uint vb = p.v_off + qi * p.v_step + g * p.head_dim;
    const uint c0 = g * p.capacity * p.head_dim + position * p.head_dim;
    for (uint j = tid; 2u * j < p.head_dim; j += WG_SIZE) {
        const uvec2 e = pair_of(j);
        const bool pair = e.y < p.head_dim;
        const vec2 ke = rope(vec2(k[kb + e.x], pair ? k[kb + e.y] : 0.0), j, position);
        k_cache[c0 + e.x] = ke.x;
        v_cache[c0 + e.x] = v[vb + e.x];
        if (pair) {
            k_cache[c0 + e.y] = ke.y;
            v_cache[c0 + e.y] = v[vb + e.y];
        }
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint qi = gl_WorkGroupID.z;  // the query of a chunk (0 in a decode step)
    const uint position = uint(pos[qi]);
    if (PASS == 1u) {
        append(tid, qi, gl_WorkGroupID.x, position);
        return;
    }
    if (COMBINE) {
        combine_splits(0u, tid, qi, gl_WorkGroupID.x, position, true);
        return;
    }
    // Pass 2 reads every key and value from the caches, the query's own too.
    const bool cached = PASS == 2u;
    const uint split = gl_WorkGroupID.y;
    const uint t0 = max(split * SPLIT, first_seen(position));  // this workgroup's positions t0 .. t1 - 1
    const uint t1 = SPLIT > 0u ? min(split * SPLIT + SPLIT, position + 1u) : position + 1u;
    if (t0 >= t1) {
        return;  // (the whole workgroup: t0 and t1 are uniform)
    }
    const uint group_size = p.n_head / p.n_head_kv;
    const uint g = gl_WorkGroupID.x / (group_size / HEADS);
    const uint h0 = g * group_size + gl_WorkGroupID.x % (group_size / HEADS) * HEADS;  // the first of its heads
    const uint kb = p.k_off + qi * p.k_step + g * p.head_dim;
    const uint vb = p.v_off + qi * p.v_step + g * p.head_dim;
    const uint kv0 = g * p.capacity * p.head_dim;
    const uint n_split = SPLIT > 0u ? (p.capacity + SPLIT - 1u) / SPLIT : 1u;

    // RoPE of the heads' queries and the new key into shared memory; the group's first workgroup appends k and v.
    for (uint j = tid; 2u * j < p.head_dim; j += WG_SIZE) {
        const uvec2 e = pair_of(j);
        const bool pair = e.y < p.head_dim;
        for (uint hh = 0u; hh < HEADS; hh++) {
            const uint qb = p.q_off + qi * p.q_step + (h0 + hh) * p.head_dim;
            const vec2 qe = rope(vec2(q[qb + e.x], pair ? q[qb + e.y] : 0.0), j, position);
            q_rot[hh * HD4 + e.x / 4u][e.x % 4u] = qe.x;
            if (pair) {
                q_rot[hh * HD4 + e.y / 4u][e.y % 4u] = qe.y;
            }
        }
        const vec2 ke = rope(vec2(k[kb + e.x], pair ? k[kb + e.y] : 0.0), j, position);
        k_rot[e.x / 4u][e.x % 4u] = ke.x;
        if (pair) {
            k_rot[e.y / 4u][e.y % 4u] = ke.y;
        }
        if (!cached && h0 % group_size == 0u && split == (SPLIT > 0u ? position / SPLIT : 0u)) {
            const uint c = kv0 + position * p.head_dim;
            k_cache[c + e.x] = ke.x;
            v_cache[c + e.x] = v[vb + e.x];
            if (pair) {
                k_cache[c + e.y] = ke.y;
                v_cache[c + e.y] = v[vb + e.y];
            }
        }
    }
    for (uint d = p.head_dim + tid; d < (p.head_dim + 3u) / 4u * 4u; d += WG_SIZE) {
        for (uint hh = 0u; hh < HEADS; hh++) {
            q_rot[hh * HD4 + d / 4u][d % 4u] = 0.0;
        }
        k_rot[d / 4u][d % 4u] = 0.0;
    }
    memoryBarrierShared();
    barrier();

    // Scores; each invocation takes positions t0 + tid, t0 + tid + WG_SIZE, ... (the new key's from k_rot).
    // Head j's are at sb + j * capacity.
    const uint sb = qi * p.scratch_step + h0 * p.capacity;
    float m[HEADS];
    for (uint j = 0u; j < HEADS; j++) {
        m[j] = -1.0 / 0.0;
    }
    if (KEY_LANES == 1u) {
        for (uint t = t0 + tid; t < t1; t += WG_SIZE) {
            float s[HEADS];
            scores_of(kv0 + t * p.head_dim, cached || t < position, s);
            for (uint j = 0u; j < HEADS; j++) {
                const float sj = score(s[j]);
                scores[sb + j * p.capacity + t] = sj;
                m[j] = max(m[j], sj);
            }
        }
    } else {
        // Position t0 + r + pass * at_once to the KEY_LANES invocations of row r, lane l the key's vec4s l, l + KEY_LANES, ...
        const uint at_once = WG_SIZE / KEY_LANES;
        const uint lane = tid % KEY_LANES;
        for (uint from = t0; from < t1; from += at_once) {  // (uniform: sum_lanes has barriers)
            const uint t = from + tid / KEY_LANES;
            float s[HEADS];
            for (uint j = 0u; j < HEADS; j++) {
                s[j] = 0.0;
            }
            if (t < t1) {
                const bool from_cache = cached || t < position;
                const uint base = kv0 + t * p.head_dim;
                for (uint i = lane; 4u * i < p.head_dim; i += KEY_LANES) {
                    const vec4 kk = from_cache ? cached_key(base, i) : k_rot[i];
                    for (uint j = 0u; j < HEADS; j++) {
                        const vec4 qq = q_rot[j * HD4 + i];
                        s[j] += qq.x * kk.x;
                        s[j] += qq.y * kk.y;
                        s[j] += qq.z * kk.z;
                        s[j] += qq.w * kk.w;
                    }
                }
            }
            for (uint j = 0u; j < HEADS; j++) {
                const float sj = score(sum_lanes(s[j], tid));
                if (t < t1 && lane == 0u) {
                    scores[sb + j * p.capacity + t] = sj;
                    m[j] = max(m[j], sj);
                }
            }
        }
        // The exps below read scores other invocations wrote.
        memoryBarrierBuffer();
        barrier();
    }
    float sum[HEADS];
    for (uint j = 0u; j < HEADS; j++) {
        m[j] = workgroup_max(m[j]);
        if (SINKS && SPLIT == 0u) {
            m[j] = max(m[j], sinks[h0 + j]);
        }
        sum[j] = 0.0;
    }
    for (uint t = t0 + tid; t < t1; t += WG_SIZE) {
        for (uint j = 0u; j < HEADS; j++) {
            const float e = exp(scores[sb + j * p.capacity + t] - m[j]);
            scores[sb + j * p.capacity + t] = e;
            sum[j] += e;
        }
    }
    for (uint j = 0u; j < HEADS; j++) {
        sum[j] = workgroup_sum(sum[j]);
        if (SINKS && SPLIT == 0u) {
            sum[j] += exp(sinks[h0 + j] - m[j]);
        }
    }
    // Every invocation reads every weight below: make the writes visible.
    memoryBarrierBuffer();
    barrier();
    // Weighted sum of the values: dimensions 4i .. 4i+3 for i = col, col + cols, ...
    // (col = tid % cols), row r of VALUE_ROWS the positions t0 + r, t0 + r + VALUE_ROWS, ...
    // before the query's own, which is added after the rows' tree (from v in a decode step,
    // from the cache in a chunk: the same value).
    const uint t_cache = min(t1, position);
    const uint cols = WG_SIZE / VALUE_ROWS;
    const uint row = tid / cols;
    const uint vec4s = (p.head_dim + 3u) / 4u;
    for (uint k = 0u; k * cols < vec4s; k++) {  // (uniform: sum_rows has barriers)
        const uint i = k * cols + tid % cols;
        vec4 acc[HEADS];
        for (uint j = 0u; j < HEADS; j++) {
            acc[j] = vec4(0.0);
        }
        if (i < vec4s) {
            for (uint t = t0 + row; t < t_cache; t += VALUE_ROWS) {
                const vec4 vv = cached_value(kv0 + t * p.head_dim, i);
                for (uint j = 0u; j < HEADS; j++) {
                    acc[j] += scores[sb + j * p.capacity + t] * vv;
                }
            }
        }
        for (uint j = 0u; j < HEADS; j++) {
            acc[j] = sum_rows(acc[j], tid, row, VALUE_ROWS, cols);
        }
        if (row > 0u || i >= vec4s) {
            continue;
        }
        const uint own = kv0 + position * p.head_dim;  // the query's own value in the cache (a chunk)
        for (uint j = 0u; j < HEADS; j++) {
            const uint h = h0 + j;
            const uint ob = p.out_off + qi * p.out_step + h * p.head_dim;
            const uint pb = SPLIT > 0u ? partial(qi, h, split, n_split) : 0u;
            for (uint c = 0u; c < 4u && 4u * i + c < p.head_dim; c++) {
                const uint d = 4u * i + c;
                float a = acc[j][c];
                if (t1 > t_cache) {
                    a += scores[sb + j * p.capacity + position] * (cached ? v_cache[own + d] : v[vb + d]);
                }
                if (SPLIT > 0u) {
                    partials[pb + 4u + d] = a;
                } else {
                    o[ob + d] = a * (1.0 / sum[j]);
                }
            }
        }
    }
    for (uint j = 0u; j < HEADS; j++) {
        const uint h = h0 + j;
        if (SPLIT > 0u) {
            if (tid == 0u) {
                const uint pb = partial(qi, h, split, n_split);
                partials[pb] = m[j];
                partials[pb + 1u] = sum[j];
            }
        } else {
            store_out_q8_1(tid, WG_SIZE, qi, h, p.out_off + qi * p.out_step + h * p.head_dim, true);
        }
    }
    if (FOLD && SPLIT > 0u) {
        // Every split with positions (position / SPLIT + 1 of them, less
        // those before the window's first) draws a
        // ticket once its partial results are out; the last combines them.
        memoryBarrierBuffer();
        barrier();
        if (tid == 0u) {
            const uint at = ticket(qi, gl_WorkGroupID.x, n_split);
            const bool last = atomicAdd(tickets[at], 1u) == position / SPLIT - first_seen(position) / SPLIT;
            if (last) {
                atomicExchange(tickets[at], 0u);
            }
            last_of_splits = last;
        }
        memoryBarrierShared();
        barrier();
        if (!last_of_splits) {
            return;  // (the whole workgroup)
        }
        memoryBarrierBuffer();
        combine_heads(tid, qi, h0, position);
    }
}
