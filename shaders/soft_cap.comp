#version 450
// Soft-capping of n vectors in place (Gemma 2's final logits): x = c *
// tanh(x / c) (soft_cap.glsl: finite for any x but NaN). One invocation per
// value; workgroup row y is the vector.
//
// Bindings: 0 x.

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) restrict buffer X { float x[]; };

layout(push_constant) uniform Params {
    uint n;  // values per vector
    uint off, stride;  // first value of vector 0, floats between vectors
    float cap;
} p;

#include "soft_cap.glsl"

void main() {
    const uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const uint at = p.off + gl_WorkGroupID.y * p.stride + i;
    x[at] = soft_cap(x[at], p.cap);
}
