#version 450
// RMSNorm with weight, of n vectors (one workgroup each):
//   y = x / sqrt(mean(x^2) + eps) * w
// With ADD_RESIDUAL (specialization constant 1) the residual add comes
// first and is kept: x += r, written back to x, then y = norm(x) * w. This is
// how a llama layer's residual adds run: fused into the norm that follows
// them, so the residual stream is read once.
//
// Bindings: 0 x (read-write), 1 r (read when ADD_RESIDUAL), 2 w, 3 y.
// Variants: REDUCE_SUBGROUP (reduce.glsl).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const bool ADD_RESIDUAL = false;

layout(std430, binding = 0) restrict buffer X { float x[]; };
layout(std430, binding = 1) readonly restrict buffer R { float r[]; };
layout(std430, binding = 2) readonly restrict buffer W { float w[]; };
layout(std430, binding = 3) writeonly restrict buffer Y { float y[]; };

layout(push_constant) uniform Params {
    uint n;         // values per vector
    uint x_off;     // first value of vector 0, and floats between vectors, per tensor
    uint x_stride;
    uint r_off;
    uint r_stride;
    uint y_off;
    uint y_stride;
    float eps;
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
#include "reduce.glsl"

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v = gl_WorkGroupID.x;
    const uint xb = p.x_off + v * p.x_stride;
    float sum = 0.0;
    for (uint i = tid; i < p.n; i += WG_SIZE) {
        float xi = x[xb + i];
        if (ADD_RESIDUAL) {
            xi += r[p.r_off + v * p.r_stride + i];
            x[xb + i] = xi;  // read back below by this same invocation
        }
        sum += xi * xi;
    }
    const float scale = 1.0 / sqrt(workgroup_sum(sum) / float(p.n) + p.eps);
    const uint yb = p.y_off + v * p.y_stride;
    for (uint i = tid; i < p.n; i += WG_SIZE) {
        y[yb + i] = (x[xb + i] * scale) * w[i];
    }
}
