#version 450
// RMSNorm with weight, of n vectors:
//   y = x / sqrt(mean(x^2) + eps) * w
// With ADD_RESIDUAL (specialization constant 1) the residual add comes
// first and is kept: x_out = x + r, then y = norm(x_out) * w. This is how a
// llama layer's residual adds run: fused into the norm that follows them, so
// the residual stream is read once. With RESIDUAL_SLOTS (specialization
// constant 3) k > 0, r is the weighted sum of k vectors, a mixture-of-experts
// layer's selected experts' outputs (MUL_MAT_ID's slots v*k .. v*k + k - 1,
// r_stride apart, weights rw[v*k + j]), added in slot order as llama.cpp
// adds them: the experts' sum needs no dispatch of its own.
//
// A vector is spread over gl_NumWorkGroups.x workgroups (workgroup row y is
// the vector): each reads the whole vector (x + the residual) for the sum
// of squares itself, in the same order and the same tree in every
// workgroup, so every workgroup's scale is the same bits: the redundant
// reads are a GPU's L2 hits (16 KB of a 4096-value vector, read by its 8
// workgroups), cheaper than a second dispatch and barrier to share one sum.
// Then workgroup g takes its own slice, whole 32-value blocks
// g * slice .. (g + 1) * slice - 1 (slice: the blocks over the workgroups,
// rounded up; the last slice may be short or empty), a block per
// invocation, in registers: the residual add, y, and with X_PLANES
// (specialization constant 2) of 1 or 2 the block's Q8_1 (q8_1.glsl) for the
// int8 mat-vec path, from the very values written to y. Each block of
// x_out is written by its slice's owner alone. One workgroup per vector (a
// CPU driver's launch) may write x_out over x; several must not, as a
// workgroup may still be summing what another would overwrite: the host
// gives them another tensor.
//
// Bindings: 0 x, 1 r (read when ADD_RESIDUAL), 2 w, 3 y, 4 xq (written when
// X_PLANES > 0), 5 rw (read when RESIDUAL_SLOTS > 0), 6 x_out (written when
// ADD_RESIDUAL). Variants: REDUCE_SUBGROUP (reduce.glsl).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const bool ADD_RESIDUAL = false;
layout(constant_id = 2) const uint X_PLANES = 0;
layout(constant_id = 3) const uint RESIDUAL_SLOTS = 0;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer R { float r[]; };
layout(std430, binding = 2) readonly buffer W { float w[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) writeonly restrict buffer XQ { uvec4 xq[]; };
layout(std430, binding = 5) readonly restrict buffer RW { float rw[]; };
layout(std430, binding = 6) writeonly buffer XOut { float x_out[]; };
// The same buffers four values at a time (float4.glsl), where every vector
// starts on a whole vec4 (`aligned`).
layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 1) readonly buffer R4 { vec4 r4[]; };
layout(std430, binding = 2) readonly buffer W4 { vec4 w4[]; };
layout(std430, binding = 3) writeonly buffer Y4 { vec4 y4[]; };
layout(std430, binding = 6) writeonly buffer XOut4 { vec4 x_out4[]; };

layout(push_constant) uniform Params {
    uint n;         // values per vector
    uint x_off;     // first value of vector 0, and floats between vectors, per tensor
    uint x_stride;
    uint r_off;
    uint r_stride;
    uint y_off;
    uint y_stride;
    float eps;
    uint xq_stride; // Q8_1 blocks between vectors of xq
    uint rw_off;    // RESIDUAL_SLOTS: the first weight of vector 0
    uint xo_off;    // x_out: the first value of vector 0, and floats between vectors
    uint xo_stride;
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
#include "reduce.glsl"
#include "q8_1.glsl"
#include "float4.glsl"

FLOAT4_READER(x_at, x, x4)
FLOAT4_READER(r_at, r, r4)
FLOAT4_READER(w_at, w, w4)
FLOAT4_WRITER(y_put, y, y4)
FLOAT4_WRITER(x_out_put, x_out, x_out4)

// Values i .. i+3 of vector v's residual.
vec4 residual(uint v, uint i, bool aligned) {
    if (RESIDUAL_SLOTS == 0u) {
        return r_at(p.r_off + v * p.r_stride, i, p.n, aligned);
    }
    const uint s0 = v * RESIDUAL_SLOTS;
    precise vec4 acc = r_at(p.r_off + s0 * p.r_stride, i, p.n, aligned) * rw[p.rw_off + s0];
    for (uint j = 1u; j < RESIDUAL_SLOTS; j++) {
        precise vec4 term = r_at(p.r_off + (s0 + j) * p.r_stride, i, p.n, aligned) * rw[p.rw_off + s0 + j];
        acc = acc + term;
    }
    return acc;
}

// x (+ the residual) at values i .. i+3 of vector v.
vec4 input_at(uint v, uint i, bool aligned) {
    const vec4 xi = x_at(p.x_off + v * p.x_stride, i, p.n, aligned);
    return ADD_RESIDUAL ? xi + residual(v, i, aligned) : xi;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v = gl_WorkGroupID.y;
    const bool aligned = ((p.n | p.x_off | p.x_stride | p.r_off | p.r_stride | p.y_off | p.y_stride | p.xo_off
                           | p.xo_stride) & 3u) == 0u;
    float sum = 0.0;
    for (uint i = 4u * tid; i < p.n; i += 4u * WG_SIZE) {
        const vec4 xi = input_at(v, i, aligned);
        sum += xi.x * xi.x;
        sum += xi.y * xi.y;
        sum += xi.z * xi.z;
        sum += xi.w * xi.w;
    }
    const float scale = 1.0 / sqrt(workgroup_sum(sum) / float(p.n) + p.eps);
    const uint yb = p.y_off + v * p.y_stride;
    const uint xob = p.xo_off + v * p.xo_stride;
    const uint blocks = (p.n + 31u) / 32u;
    const uint slice = (blocks + gl_NumWorkGroups.x - 1u) / gl_NumWorkGroups.x;
    const uint slice_end = min(blocks, (gl_WorkGroupID.x + 1u) * slice);
    for (uint b = gl_WorkGroupID.x * slice + tid; b < slice_end; b += WG_SIZE) {
        vec4 vals[8];
        for (uint j = 0u; j < 8u; j++) {
            const uint i = 32u * b + 4u * j;
            vec4 yi = vec4(0.0);
            if (i < p.n) {
                const vec4 xi = input_at(v, i, aligned);
                yi = (xi * scale) * w_at(0u, i, p.n, aligned);
                if (ADD_RESIDUAL) {
                    x_out_put(xob, i, p.n, aligned, xi);
                }
                y_put(yb, i, p.n, aligned, yi);
            }
            vals[j] = yi;
        }
        if (X_PLANES > 0u) {
            store_q8_1(vals, v * p.xq_stride + b);
        }
    }
}
