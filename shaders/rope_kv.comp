#version 450
// RoPE of a llama layer's queries and keys, and the new keys and values into
// the KV cache, for n vectors at positions pos[0], pos[0]+1, ...
//
// ggml's "normal" mode: adjacent pairs (x[2i], x[2i+1]) of each head rotate by
// angle pos * theta_i for 2i < n_rot; the rest of the head is left as it is.
// cos and sin come from a table (pos, n_rot/2) of (cos, sin), computed by the
// host in float64 (base, linear scaling, frequency factors): exact, and no
// GPU sin/cos of large angles.
// Queries are rotated in place. Keys are rotated into the K cache, values
// copied into the V cache; each cache is (n_head_kv, capacity, head_dim), so
// a head's keys are contiguous for the attention that reads them.
// Workgroup (head, v): heads 0..n_head-1 are query heads, the next n_head_kv
// key/value heads; invocation j takes elements 2j and 2j+1 of the head.
//
// Bindings: 0 q (read-write), 1 k, 2 v, 3 K cache, 4 V cache, 5 table, 6 pos.

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) restrict buffer Q { float q[]; };
layout(std430, binding = 1) readonly restrict buffer K { float k[]; };
layout(std430, binding = 2) readonly restrict buffer V { float v[]; };
layout(std430, binding = 3) writeonly restrict buffer KCache { float k_cache[]; };
layout(std430, binding = 4) writeonly restrict buffer VCache { float v_cache[]; };
layout(std430, binding = 5) readonly restrict buffer Table { vec2 cos_sin[]; };
layout(std430, binding = 6) readonly restrict buffer Pos { int pos[]; };

layout(push_constant) uniform Params {
    uint q_off, q_stride;  // first value of vector 0, and floats between vectors
    uint k_off, k_stride;
    uint v_off, v_stride;
    uint n_head, n_head_kv, head_dim, n_rot;
    uint capacity;  // positions the caches hold
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;

void main() {
    const uint head = gl_WorkGroupID.x;
    const uint vec_i = gl_WorkGroupID.y;
    const uint position = uint(pos[0]) + vec_i;  // the host keeps it below capacity
    const bool is_q = head < p.n_head;
    const uint g = head - p.n_head;  // K/V head when !is_q
    const uint src = is_q ? p.q_off + vec_i * p.q_stride + head * p.head_dim
                          : p.k_off + vec_i * p.k_stride + g * p.head_dim;
    const uint dst = (g * p.capacity + position) * p.head_dim;  // in the caches
    const uint vsrc = p.v_off + vec_i * p.v_stride + g * p.head_dim;
    for (uint j = gl_LocalInvocationID.x; 2u * j < p.head_dim; j += WG_SIZE) {
        const uint e = 2u * j;
        const bool pair = e + 1u < p.head_dim;
        float x0 = is_q ? q[src + e] : k[src + e];
        float x1 = pair ? (is_q ? q[src + e + 1u] : k[src + e + 1u]) : 0.0;
        if (e < p.n_rot) {  // n_rot is even (the host checks)
            const vec2 cs = cos_sin[position * (p.n_rot / 2u) + j];
            const float r0 = x0 * cs.x - x1 * cs.y;
            const float r1 = x0 * cs.y + x1 * cs.x;
            x0 = r0;
            x1 = r1;
        }
        if (is_q) {
            q[src + e] = x0;
            if (pair) {
                q[src + e + 1u] = x1;
            }
        } else {
            k_cache[dst + e] = x0;
            v_cache[dst + e] = v[vsrc + e];
            if (pair) {
                k_cache[dst + e + 1u] = x1;
                v_cache[dst + e + 1u] = v[vsrc + e + 1u];
            }
        }
    }
}
