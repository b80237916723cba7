#version 450
// RMSNorm with weight, of n vectors (one workgroup each):
//   y = x / sqrt(mean(x^2) + eps) * w
// With ADD_RESIDUAL (specialization constant 1) the residual add comes
// first and is kept: x += r, written back to x, then y = norm(x) * w. This is
// how a llama layer's residual adds run: fused into the norm that follows
// them, so the residual stream is read once. With RESIDUAL_SLOTS
// (specialization constant 3) k > 0, r is the weighted sum of k vectors, a
// mixture-of-experts layer's selected experts' outputs (MUL_MAT_ID's slots
// v*k .. v*k + k - 1, r_stride apart, weights rw[v*k + j]), added in slot
// order as llama.cpp adds them: the experts' sum needs no dispatch of its own.
//
// With X_PLANES (specialization constant 2) of 1 or 2, y is also written as
// Q8_1 blocks (q8_1.glsl) to xq, the int8 mat-vec path's input: the
// workgroup reads back the y it wrote, so xq holds exactly what
// quantize_q8_1.comp would make of y.
//
// Bindings: 0 x (read-write), 1 r (read when ADD_RESIDUAL), 2 w, 3 y, 4 xq
// (written when X_PLANES > 0), 5 rw (read when RESIDUAL_SLOTS > 0).
// Variants: REDUCE_SUBGROUP (reduce.glsl).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const bool ADD_RESIDUAL = false;
layout(constant_id = 2) const uint X_PLANES = 0;
layout(constant_id = 3) const uint RESIDUAL_SLOTS = 0;

layout(std430, binding = 0) restrict buffer X { float x[]; };
layout(std430, binding = 1) readonly restrict buffer R { float r[]; };
layout(std430, binding = 2) readonly restrict buffer W { float w[]; };
layout(std430, binding = 3) coherent restrict buffer Y { float y[]; };
layout(std430, binding = 4) writeonly restrict buffer XQ { uvec4 xq[]; };
layout(std430, binding = 5) readonly restrict buffer RW { float rw[]; };

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
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
#include "reduce.glsl"
#include "q8_1.glsl"

// Value i of vector v's residual.
float residual(uint v, uint i) {
    if (RESIDUAL_SLOTS == 0u) {
        return r[p.r_off + v * p.r_stride + i];
    }
    const uint s0 = v * RESIDUAL_SLOTS;
    precise float acc = r[p.r_off + s0 * p.r_stride + i] * rw[p.rw_off + s0];
    for (uint j = 1u; j < RESIDUAL_SLOTS; j++) {
        precise float term = r[p.r_off + (s0 + j) * p.r_stride + i] * rw[p.rw_off + s0 + j];
        acc = acc + term;
    }
    return acc;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v = gl_WorkGroupID.x;
    const uint xb = p.x_off + v * p.x_stride;
    float sum = 0.0;
    for (uint i = tid; i < p.n; i += WG_SIZE) {
        float xi = x[xb + i];
        if (ADD_RESIDUAL) {
            xi += residual(v, i);
            x[xb + i] = xi;  // read back below by this same invocation
        }
        sum += xi * xi;
    }
    const float scale = 1.0 / sqrt(workgroup_sum(sum) / float(p.n) + p.eps);
    const uint yb = p.y_off + v * p.y_stride;
    for (uint i = tid; i < p.n; i += WG_SIZE) {
        y[yb + i] = (x[xb + i] * scale) * w[i];
    }
    if (X_PLANES > 0u) {
        memoryBarrierBuffer();
        barrier();
        for (uint b = tid; b < (p.n + 31u) / 32u; b += WG_SIZE) {
            vec4 vals[8];
            for (uint j = 0u; j < 8u; j++) {
                for (uint c = 0u; c < 4u; c++) {
                    const uint i = 32u * b + 4u * j + c;
                    vals[j][c] = i < p.n ? y[yb + i] : 0.0;
                }
            }
            store_q8_1(vals, v * p.xq_stride + b);
        }
    }
}
