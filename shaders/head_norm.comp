#version 450
// A mat-vec's output made ready for the attention, in place, head by head
// (Qwen's additions to a llama layer, vkq/llama/architectures.py):
//   x += bias                                   (BIAS: Qwen2's Q, K and V)
//   x = x / sqrt(mean(x^2) + eps) * w           (NORM: Qwen3's Q and K, per head)
// for n tokens' vectors of heads * head_dim values. Workgroup (h, t) takes
// head h of token t: its values at off + t * step + h * head_dim. The bias
// covers every head (value h * head_dim + i); the norm's weight is one
// head's, shared by all. Each invocation reads and writes only its own
// values (i = tid, tid + WG_SIZE, ...), so in place needs no barrier
// beyond the sum's.
//
// Bindings: 0 x (read and written), 1 bias (read when BIAS), 2 w (read when
// NORM). Variants: REDUCE_SUBGROUP (reduce.glsl).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const bool BIAS = false;
layout(constant_id = 2) const bool NORM = false;

layout(std430, binding = 0) restrict buffer X { float x[]; };
layout(std430, binding = 1) readonly restrict buffer Bias { float bias[]; };
layout(std430, binding = 2) readonly restrict buffer W { float w[]; };

layout(push_constant) uniform Params {
    uint off;       // first value of token 0's first head
    uint step;      // floats between tokens
    uint head_dim;  // values per head
    float eps;
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
#include "reduce.glsl"

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint h = gl_WorkGroupID.x;
    const uint base = p.off + gl_WorkGroupID.y * p.step + h * p.head_dim;
    float sum = 0.0;
    for (uint i = tid; i < p.head_dim; i += WG_SIZE) {
        float v = x[base + i];
        if (BIAS) {
            v += bias[h * p.head_dim + i];
            x[base + i] = v;
        }
        sum += v * v;
    }
    if (!NORM) {
        return;
    }
    const float scale = 1.0 / sqrt(workgroup_sum(sum) / float(p.head_dim) + p.eps);
    for (uint i = tid; i < p.head_dim; i += WG_SIZE) {
        x[base + i] = (x[base + i] * scale) * w[i];
    }
}
