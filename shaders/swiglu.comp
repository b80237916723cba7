#version 450
// SwiGLU of a llama FFN, for n vectors: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
// gate and up may be two parts of one tensor (the stacked gate/up mat-vec).
//
// Bindings: 0 gate, 1 up, 2 out. Workgroup row y is the vector.

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) readonly restrict buffer Gate { float gate[]; };
layout(std430, binding = 1) readonly restrict buffer Up { float up[]; };
layout(std430, binding = 2) writeonly restrict buffer Out { float o[]; };

layout(push_constant) uniform Params {
    uint n;  // values per vector
    uint g_off, g_stride;  // first value of vector 0, and floats between vectors, per tensor
    uint u_off, u_stride;
    uint o_off, o_stride;
} p;

void main() {
    const uint i = gl_GlobalInvocationID.x;
    const uint v = gl_WorkGroupID.y;
    if (i >= p.n) {
        return;
    }
    const float g = gate[p.g_off + v * p.g_stride + i];
    o[p.o_off + v * p.o_stride + i] = g / (1.0 + exp(-g)) * up[p.u_off + v * p.u_stride + i];
}
