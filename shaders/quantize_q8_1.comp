#version 450
// Quantizes fp32 activations to Q8_1 blocks for the int8 mat-vec path.
// One invocation per 32-element block of one column, as ggml's reference
// quantizer does it: d = amax/127, q = round-half-away(x/d), plus
// s0/s1 = d * (sum of q) over each 16-element half, which lets the int8 path
// apply block minimums and offsets without unpacking. d and s are kept in
// fp32 (ggml keeps them in fp16): exact sums, no fp16 overflow, same loads.
// Output block b is 3 uvec4: the 32 quants, then (d, s0, s1, 0) as float bits.

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer XQ { uvec4 xq[]; };

layout(push_constant) uniform Params {
    uint nblocks;        // Q8_1 blocks per column
    uint x_col_stride;   // floats between columns of x
    uint xq_col_stride;  // blocks between columns of xq
} p;

uint pack_i8x4(ivec4 q) {
    return uint(q.x & 0xFF) | (uint(q.y & 0xFF) << 8) | (uint(q.z & 0xFF) << 16) | (uint(q.w & 0xFF) << 24);
}

void main() {
    const uint b = gl_GlobalInvocationID.x;
    const uint col = gl_WorkGroupID.y;
    if (b >= p.nblocks) {
        return;
    }
    vec4 v[8];
    float amax = 0.0;
    const uint k4 = (col * p.x_col_stride + 32u * b) / 4u;
    for (uint i = 0u; i < 8u; i++) {
        v[i] = x4[k4 + i];
        vec4 a = abs(v[i]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    uint packed[8];
    ivec2 qsum = ivec2(0);
    for (uint i = 0u; i < 8u; i++) {
        const vec4 s = v[i] * id;
        const ivec4 q = ivec4(sign(s) * floor(abs(s) + 0.5));  // round half away from zero
        packed[i] = pack_i8x4(q);
        qsum[i / 4u] += q.x + q.y + q.z + q.w;
    }
    const uint o = 3u * (col * p.xq_col_stride + b);
    xq[o] = uvec4(packed[0], packed[1], packed[2], packed[3]);
    xq[o + 1u] = uvec4(packed[4], packed[5], packed[6], packed[7]);
    xq[o + 2u] = uvec4(floatBitsToUint(d), floatBitsToUint(d * float(qsum.x)),
                       floatBitsToUint(d * float(qsum.y)), 0u);
}
