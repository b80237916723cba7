#version 450
// SwiGLU of a llama FFN, for n vectors: out = silu(gate) * up, silu(x) = x / (1 + exp(-x));
// with GELU (a define: the variant swiglu_gelu), GeGLU: out = gelu(gate) * up (gelu.glsl);
// with OAI (swiglu_oai), gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up, -7, 7),
// out = g / (1 + exp(-1.702 g)) * (u + 1), as ggml's swiglu_oai.
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

layout(std430, binding = 0) readonly buffer Gate { float gate[]; };
layout(std430, binding = 1) readonly buffer Up { float up[]; };
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
// The same buffers four values at a time (float4.glsl), where every vector
// starts on a whole vec4 (`aligned`).
layout(std430, binding = 0) readonly buffer Gate4 { vec4 gate4[]; };
layout(std430, binding = 1) readonly buffer Up4 { vec4 up4[]; };
layout(std430, binding = 2) writeonly buffer Out4 { vec4 o4[]; };
layout(std430, binding = 3) writeonly restrict buffer XQ { uvec4 xq[]; };

layout(push_constant) uniform Params {
    uint n;  // values per vector
    uint g_off, g_stride;  // first value of vector 0, and floats between vectors, per tensor
    uint u_off, u_stride;
    uint o_off, o_stride;
    uint xq_stride;  // Q8_1 blocks between vectors of xq
} p;

#include "q8_1.glsl"
#include "float4.glsl"
#include "silu.glsl"
#include "gelu.glsl"

vec4 swiglu_oai(vec4 gate, vec4 up) {
    const vec4 g = min(gate, vec4(7.0));
    return g / (1.0 + exp(1.702 * -g)) * (clamp(up, vec4(-7.0), vec4(7.0)) + 1.0);
}

#if defined(GELU)
#define GLU(g, u) (gelu(g) * (u))
#elif defined(OAI)
#define GLU(g, u) swiglu_oai(g, u)
#else
#define GLU(g, u) (silu(g) * (u))
#endif

FLOAT4_READER(gate_at, gate, gate4)
FLOAT4_READER(up_at, up, up4)
FLOAT4_WRITER(out_put, o, o4)

void main() {
    const uint b = gl_GlobalInvocationID.x;
    const uint v = gl_WorkGroupID.y;
    if (32u * b >= p.n) {
        return;
    }
    const bool aligned = ((p.n | p.g_off | p.g_stride | p.u_off | p.u_stride | p.o_off | p.o_stride) & 3u) == 0u;
    const uint gb = p.g_off + v * p.g_stride, ub = p.u_off + v * p.u_stride, ob = p.o_off + v * p.o_stride;
    vec4 vals[8];
    for (uint j = 0u; j < 8u; j++) {
        const uint i = 32u * b + 4u * j;
        vec4 s = vec4(0.0);
        if (i < p.n) {
            const vec4 g = gate_at(gb, i, p.n, aligned);
            s = GLU(g, up_at(ub, i, p.n, aligned));
            out_put(ob, i, p.n, aligned, s);
        }
        vals[j] = s;
    }
    if (X_PLANES > 0u) {
        store_q8_1(vals, v * p.xq_stride + b);
    }
}
