#version 450
// The output of a mixture-of-experts layer, for n vectors: out = the sum over
// its n_used selected experts' outputs d_j (MUL_MAT_ID's slots) of w_j * d_j,
// added in slot order (the router's order), each product and sum rounded as
// llama.cpp's separate multiply and adds round them (no fused multiply-add).
//
// Bindings: 0 d (n_used slots per vector), 1 w (n_used per vector), 2 out.
// Workgroup row y is the vector.

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) readonly restrict buffer D { float d[]; };
layout(std430, binding = 1) readonly restrict buffer W { float w[]; };
layout(std430, binding = 2) writeonly restrict buffer Out { float o[]; };

layout(push_constant) uniform Params {
    uint n;  // values per vector
    uint n_used;
    uint d_stride;  // floats between slots of d
    uint o_off, o_stride;
} p;

void main() {
    const uint i = gl_GlobalInvocationID.x;
    const uint v = gl_WorkGroupID.y;
    if (i >= p.n) {
        return;
    }
    const uint s0 = v * p.n_used;
    precise float acc = d[s0 * p.d_stride + i] * w[s0];
    for (uint j = 1u; j < p.n_used; j++) {
        precise float term = d[(s0 + j) * p.d_stride + i] * w[s0 + j];
        acc = acc + term;
    }
    o[p.o_off + v * p.o_stride + i] = acc;
}
