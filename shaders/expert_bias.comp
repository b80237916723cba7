#version 450
// A mixture of experts' biases, in place (gpt-oss's): for each slot s of a
// MUL_MAT_ID's output, x[s] += bias[ids[s]] (bias: a row of n values per
// expert). One invocation per value; workgroup row y is the slot. An id
// out of range (none: ExpertRouting writes them in range) takes the last row.
//
// Bindings: 0 x, 1 bias, 2 ids.

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) restrict buffer X { float x[]; };
layout(std430, binding = 1) readonly restrict buffer Bias { float bias[]; };
layout(std430, binding = 2) readonly restrict buffer Ids { int ids[]; };

layout(push_constant) uniform Params {
    uint n;  // values per slot
    uint off, stride;  // first value of slot 0, floats between slots
    uint n_expert;
} p;

void main() {
    const uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    const uint s = gl_WorkGroupID.y;
    const uint e = min(uint(ids[s]), p.n_expert - 1u);
    x[p.off + s * p.stride + i] += bias[e * p.n + i];
}
