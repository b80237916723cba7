#version 450
// SwiGLU of a llama FFN, for n vectors: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
// gate and up may be two parts of one tensor (the stacked gate/up mat-vec).
// One invocation per 32 values, so that with X_PLANES (specialization
// constant 1) of 1 or 2 it also writes them as one Q8_1 block (q8_1.glsl)
// to xq, the int8 mat-vec path's input.
//
// Bindings: 0 gate, 1 up, 2 out, 3 xq (written when X_PLANES > 0).
// Workgroup row y is the vector.

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint X_PLANES = 0;

layout(std430, binding = 0) readonly restrict buffer Gate { float gate[]; };
layout(std430, binding = 1) readonly restrict buffer Up { float up[]; };
layout(std430, binding = 2) writeonly restrict buffer Out { float o[]; };
layout(std430, binding = 3) writeonly restrict buffer XQ { uvec4 xq[]; };

layout(push_constant) uniform Params {
    uint n;  // values per vector
    uint g_off, g_stride;  // first value of vector 0, and floats between vectors, per tensor
    uint u_off, u_stride;
    uint o_off, o_stride;
    uint xq_stride;  // Q8_1 blocks between vectors of xq
} p;

#include "q8_1.glsl"

void main() {
    const uint b = gl_GlobalInvocationID.x;
    const uint v = gl_WorkGroupID.y;
    if (32u * b >= p.n) {
        return;
    }
    vec4 vals[8];
    for (uint j = 0u; j < 8u; j++) {
        for (uint c = 0u; c < 4u; c++) {
            const uint i = 32u * b + 4u * j + c;
            float s = 0.0;
            if (i < p.n) {
                const float g = gate[p.g_off + v * p.g_stride + i];
                s = g / (1.0 + exp(-g)) * up[p.u_off + v * p.u_stride + i];
                o[p.o_off + v * p.o_stride + i] = s;
            }
            vals[j][c] = s;
        }
    }
    if (X_PLANES > 0u) {
        store_q8_1(vals, v * p.xq_stride + b);
    }
}
