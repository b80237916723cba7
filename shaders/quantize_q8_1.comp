#version 450
// Quantizes fp32 activations to Q8_1 blocks (q8_1.glsl) for the int8
// mat-vec path: one invocation per 32-element block of one column.

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint X_PLANES = 1;

layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer XQ { uvec4 xq[]; };

layout(push_constant) uniform Params {
    uint nblocks;        // Q8_1 blocks per column
    uint x_col_stride;   // floats between columns of x
    uint xq_col_stride;  // blocks between columns of xq
} p;

#include "q8_1.glsl"

void main() {
    const uint b = gl_GlobalInvocationID.x;
    const uint col = gl_WorkGroupID.y;
    if (b >= p.nblocks) {
        return;
    }
    vec4 v[8];
    const uint k4 = (col * p.x_col_stride + 32u * b) / 4u;
    for (uint i = 0u; i < 8u; i++) {
        v[i] = x4[k4 + i];
    }
    store_q8_1(v, col * p.xq_col_stride + b);
}
