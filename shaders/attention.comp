#version 450
// Grouped-query attention of n query vectors over the KV cache (float32),
// causal: query vector v sits at position pos[0] + v and sees the keys at
// positions 0 .. pos[0] + v. Query head h reads K/V head h / (n_head / n_head_kv),
// as ggml broadcasts. Per (head, vector) workgroup:
//   s_t = (q . k_t) * scale;  p_t = exp(s_t - max s) / sum exp;  out = sum p_t v_t
// The scores live in a scratch buffer (n, n_head, capacity): any context
// length fits, where shared memory would cap it.
//
// With X_PLANES (specialization constant 1) of 1 or 2, out is also written
// as Q8_1 blocks (q8_1.glsl) to xq, the int8 mat-vec path's input: each head's
// head_dim values (a multiple of 32: the host checks) are whole blocks, read
// back by the workgroup that wrote them.
//
// Bindings: 0 q, 1 K cache, 2 V cache, 3 pos, 4 scores (scratch), 5 out, 6 xq.
// Caches are (n_head_kv, capacity, head_dim), written by rope_kv.comp.
// Variants: REDUCE_SUBGROUP (reduce.glsl).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint X_PLANES = 0;

layout(std430, binding = 0) readonly restrict buffer Q { float q[]; };
layout(std430, binding = 1) readonly restrict buffer KCache { float k_cache[]; };
layout(std430, binding = 2) readonly restrict buffer VCache { float v_cache[]; };
layout(std430, binding = 3) readonly restrict buffer Pos { int pos[]; };
layout(std430, binding = 4) restrict buffer Scores { float scores[]; };
layout(std430, binding = 5) coherent restrict buffer Out { float o[]; };
layout(std430, binding = 6) writeonly restrict buffer XQ { uvec4 xq[]; };

layout(push_constant) uniform Params {
    uint q_off, q_stride;      // first value of vector 0, and floats between vectors
    uint out_off, out_stride;
    uint n_head, n_head_kv, head_dim;
    uint capacity;             // positions the caches hold
    float scale;               // 1 / sqrt(head_dim)
    uint xq_stride;            // Q8_1 blocks between vectors of xq
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
#include "reduce.glsl"
#include "q8_1.glsl"

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint h = gl_WorkGroupID.x;
    const uint vec_i = gl_WorkGroupID.y;
    const uint g = h / (p.n_head / p.n_head_kv);
    const uint n_keys = uint(pos[0]) + vec_i + 1u;
    const uint qb = p.q_off + vec_i * p.q_stride + h * p.head_dim;
    const uint kv0 = g * p.capacity * p.head_dim;
    const uint sb = (vec_i * p.n_head + h) * p.capacity;

    // Scores; each invocation takes keys tid, tid + WG_SIZE, ...
    float m = -1.0 / 0.0;
    for (uint t = tid; t < n_keys; t += WG_SIZE) {
        const uint kb = kv0 + t * p.head_dim;
        float s = 0.0;
        for (uint d = 0u; d < p.head_dim; d++) {
            s += q[qb + d] * k_cache[kb + d];
        }
        s *= p.scale;
        scores[sb + t] = s;
        m = max(m, s);
    }
    m = workgroup_max(m);
    float sum = 0.0;
    for (uint t = tid; t < n_keys; t += WG_SIZE) {
        const float e = exp(scores[sb + t] - m);
        scores[sb + t] = e;
        sum += e;
    }
    const float inv_sum = 1.0 / workgroup_sum(sum);
    // Every invocation reads every weight below: make the writes visible.
    memoryBarrierBuffer();
    barrier();
    // Weighted sum of the values; each invocation takes dimensions tid, tid + WG_SIZE, ...
    const uint ob = p.out_off + vec_i * p.out_stride + h * p.head_dim;
    for (uint d = tid; d < p.head_dim; d += WG_SIZE) {
        float acc = 0.0;
        for (uint t = 0u; t < n_keys; t++) {
            acc += scores[sb + t] * v_cache[kv0 + t * p.head_dim + d];
        }
        o[ob + d] = acc * inv_sum;
    }
    if (X_PLANES > 0u) {
        memoryBarrierBuffer();
        barrier();
        for (uint b = tid; b < p.head_dim / 32u; b += WG_SIZE) {
            vec4 vals[8];
            for (uint j = 0u; j < 8u; j++) {
                for (uint c = 0u; c < 4u; c++) {
                    vals[j][c] = o[ob + 32u * b + 4u * j + c];
                }
            }
            store_q8_1(vals, vec_i * p.xq_stride + (h * p.head_dim) / 32u + b);
        }
    }
}
