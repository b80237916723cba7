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
// One invocation per row (invocation r: head r / BQ of the workgroup's,
// query r % BQ of its tile; invocations past the rows, or past the chunk's
// last query, compute a copy of the last one and write nothing). A row keeps
// its rotated query and its accumulator (head_dim values each) in registers
// and an online softmax over the tiles (running max m, sum l):
//   for each tile T of keys t <= pos:  s_t = (q . k_t) * scale,
//     m' = max(m, max_T s_t),  l = l e^(m - m') + sum_T e^(s_t - m'),
//     acc = acc e^(m - m') + sum_T e^(s_t - m') v_t,  m = m'
//   out = acc / l.
// The tiles are aligned to absolute positions (0, BKV, 2 BKV, ...), a tile's
// keys are taken in position order, and keys past pos are skipped (not
// multiplied by 0: the cache holds anything there). So a row's arithmetic is
// fixed by its position and the cache: the same bits whichever chunk, chunk
// size or place in the tile its query came in (a test checks it).
//
// SHARED_KV (GPUs): the workgroup copies each K and V tile into shared
// memory, then every row reads it there (one address for every invocation:
// a broadcast). Without (CPU drivers), every invocation reads the tile from
// the caches at the same addresses, which lavapipe loads once per subgroup
// and broadcasts, with no barrier (a barrier costs lavapipe more than the
// loads; it reads shared memory lane by lane where addresses differ).
//
// head_dim and n_rot are specialization constants (HEAD_DIM, at most
// MAX_HEAD_DIM; N_ROT), so that the loops over a head's values have constant
// trip counts and are unrolled ([[unroll]]): lavapipe counts every iteration
// of a loop that remains against its budget of 65535 per invocation. What
// remains: the loop over the tiles and, in each, two over its keys (scores,
// then values): vkq.llama.chunk_attention.tiled_attention_loop_iterations.
// The loops over a tile's keys stay loops: unrolled too, lavapipe took
// minutes to compile the shader (16 keys x 32 vec4s at head_dim 128).
//
// RoPE of the queries as shaders/attention.comp's (ggml's normal mode, or
// NEOX), from the same (capacity, n_rot/2) table of (cos, sin); the score's
// sum runs in attention.comp's order.
//
// Bindings: 0 q (unrotated), 1 K cache, 2 V cache, 3 RoPE table, 4 pos, 5 out.
// The caches are (n_head_kv, capacity, head_dim).

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint HEAD_DIM = 64;
layout(constant_id = 2) const uint HEADS = 1;  // query heads per workgroup
layout(constant_id = 3) const uint BQ = 8;  // queries per workgroup
layout(constant_id = 4) const uint BKV = 16;  // keys per tile
layout(constant_id = 5) const bool NEOX = false;
layout(constant_id = 6) const bool SHARED_KV = false;
layout(constant_id = 7) const uint N_ROT = 64;  // RoPE's dimensions of a head (even, at most HEAD_DIM)

const uint WG_SIZE = gl_WorkGroupSize.x;
const uint HD4 = (HEAD_DIM + 3u) / 4u;  // vec4s of a head, zero past HEAD_DIM
const bool ALIGNED = HEAD_DIM % 4u == 0u;  // a cached head is whole vec4s
const uint KV_TILE = SHARED_KV ? BKV * HD4 : 1u;

layout(std430, binding = 0) readonly restrict buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer KCache { float k_cache[]; };
layout(std430, binding = 2) readonly buffer VCache { float v_cache[]; };
layout(std430, binding = 1) readonly buffer KCache4 { vec4 k_cache4[]; };
layout(std430, binding = 2) readonly buffer VCache4 { vec4 v_cache4[]; };
layout(std430, binding = 3) readonly restrict buffer Table { vec2 cos_sin[]; };
layout(std430, binding = 4) readonly restrict buffer Pos { int pos[]; };
layout(std430, binding = 5) writeonly restrict buffer Out { float o[]; };

layout(push_constant) uniform Params {
    uint q_off, q_step, out_off, out_step;  // first value of the vectors in their tensors, floats between them
    uint n;  // queries in the chunk
    uint n_head, n_head_kv;
    uint capacity;  // positions the caches hold
    float scale;  // 1 / sqrt(head_dim)
} p;

shared vec4 k_tile[KV_TILE];
shared vec4 v_tile[KV_TILE];

// Values 4i .. 4i+3 of the cached head at element `base` (0 past HEAD_DIM).
vec4 cached_key(uint base, uint i) {
    if (ALIGNED) {
        return k_cache4[base / 4u + i];
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
        return v_cache4[base / 4u + i];
    }
    vec4 x = vec4(0.0);
    [[unroll]] for (uint c = 0u; c < 4u; c++) {
        if (4u * i + c < HEAD_DIM) {
            x[c] = v_cache[base + 4u * i + c];
        }
    }
    return x;
}

// Element d of head `qb`'s query rotated for position `at` (attention.comp's
// rope of the pair d belongs to, written in its order). d is a constant of
// an unrolled loop, as N_ROT is: which pair and which of its two is known
// when the shader is specialized.
float rotated(uint qb, uint d, uint at) {
    if (d >= N_ROT) {
        return q[qb + d];
    }
    const uint half_rot = N_ROT / 2u;
    const uint j = NEOX ? d % half_rot : d / 2u;
    const uint first = NEOX ? j : 2u * j;
    const uint second = NEOX ? j + half_rot : first + 1u;
    const vec2 x = vec2(q[qb + first], q[qb + second]);
    const vec2 cs = cos_sin[at * half_rot + j];
    return d == first ? x.x * cs.x - x.y * cs.y : x.x * cs.y + x.y * cs.x;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint group_size = p.n_head / p.n_head_kv;
    const uint g = gl_WorkGroupID.x / (group_size / HEADS);
    const uint h0 = g * group_size + gl_WorkGroupID.x % (group_size / HEADS) * HEADS;
    const uint q0 = gl_WorkGroupID.y * BQ;  // the tile's first query in the chunk
    const uint row = min(tid, BQ * HEADS - 1u);
    const uint h = h0 + row / BQ;
    const uint qi = min(q0 + row % BQ, p.n - 1u);
    const bool writes = tid < BQ * HEADS && q0 + row % BQ < p.n;
    const uint position = uint(pos[qi]);
    uint last = 0u;  // the largest position of the tile's queries: every invocation walks its keys
    [[unroll]] for (uint j = 0u; j < BQ; j++) {
        last = max(last, uint(pos[min(q0 + j, p.n - 1u)]));
    }
    const uint kv0 = g * p.capacity * HEAD_DIM;

    vec4 qv[HD4];
    const uint qb = p.q_off + qi * p.q_step + h * HEAD_DIM;
    [[unroll]] for (uint i = 0u; i < HD4; i++) {
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            qv[i][c] = 4u * i + c < HEAD_DIM ? rotated(qb, 4u * i + c, position) : 0.0;
        }
    }
    vec4 acc[HD4];
    [[unroll]] for (uint i = 0u; i < HD4; i++) {
        acc[i] = vec4(0.0);
    }
    float m = -1.0 / 0.0;
    float l = 0.0;

    for (uint t0 = 0u; t0 <= last; t0 += BKV) {
        if (SHARED_KV) {
            [[unroll]] for (uint it = 0u; it < (BKV * HD4 + WG_SIZE - 1u) / WG_SIZE; it++) {
                const uint e = it * WG_SIZE + tid;
                if (e < BKV * HD4) {
                    // (past the capacity: any cached key; the rows skip it)
                    const uint base = kv0 + min(t0 + e / HD4, p.capacity - 1u) * HEAD_DIM;
                    k_tile[e] = cached_key(base, e % HD4);
                    v_tile[e] = cached_value(base, e % HD4);
                }
            }
            barrier();
        }
        if (t0 <= position) {
            // The row's keys in this tile: t0 .. t0 + n_t - 1 (not past its position).
            const uint n_t = min(BKV, position + 1u - t0);
            float s[BKV];
            float mt = -1.0 / 0.0;
            for (uint t = 0u; t < n_t; t++) {
                const uint base = kv0 + (t0 + t) * HEAD_DIM;
                float dot = 0.0;
                [[unroll]] for (uint i = 0u; i < HD4; i++) {
                    const vec4 kk = SHARED_KV ? k_tile[t * HD4 + i] : cached_key(base, i);
                    dot += qv[i].x * kk.x;
                    dot += qv[i].y * kk.y;
                    dot += qv[i].z * kk.z;
                    dot += qv[i].w * kk.w;
                }
                s[t] = dot * p.scale;
                mt = max(mt, s[t]);
            }
            const float m_new = max(m, mt);
            const float alpha = exp(m - m_new);
            l *= alpha;
            [[unroll]] for (uint i = 0u; i < HD4; i++) {
                acc[i] *= alpha;
            }
            for (uint t = 0u; t < n_t; t++) {
                const uint base = kv0 + (t0 + t) * HEAD_DIM;
                const float e = exp(s[t] - m_new);
                l += e;
                [[unroll]] for (uint i = 0u; i < HD4; i++) {
                    acc[i] += e * (SHARED_KV ? v_tile[t * HD4 + i] : cached_value(base, i));
                }
            }
            m = m_new;
        }
        if (SHARED_KV) {
            barrier();  // the tiles are overwritten next
        }
    }

    if (writes) {
        const float inv_l = 1.0 / l;
        const uint ob = p.out_off + qi * p.out_step + h * HEAD_DIM;
        [[unroll]] for (uint i = 0u; i < HD4; i++) {
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                if (4u * i + c < HEAD_DIM) {
                    o[ob + 4u * i + c] = acc[i][c] * inv_l;
                }
            }
        }
    }
}
