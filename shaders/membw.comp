#version 450
// Device memory read bandwidth: the reference of `vkq bench`'s "% bw" column
// (vkq/commands/bench.py memory_bandwidth). One dispatch reads four buffers (one per
// binding: a binding may address only maxStorageBufferRange, 128 MiB on
// lavapipe), together far past any cache; workgroup row y reads buffer y.
// Each workgroup reads one contiguous chunk, its invocations side by side
// (coalesced on a GPU), 16 bytes per load, the widest the mat-vec shaders
// use. Each invocation writes the sum of what it read: the loads cannot be
// optimized away, and the host checks that every word was read (llvmpipe
// silently ends a loop after about 65535 iterations, so the host keeps the
// loop short).
//
// TEXEL: the buffers are read through uniform texel buffer views, as the
// mat-vec reads its weights where the tables say so (lavapipe: a branch-free
// gather, where a storage load at varying offsets is a loop over the lanes).

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
// LANE_RUNS (specialization constant 1): each invocation reads its own
// contiguous run of the chunk instead, as a thread owning whole rows of a
// mat-vec does (a CPU driver's lanes then each stream one run).
layout(constant_id = 1) const bool LANE_RUNS = false;

#ifdef TEXEL
layout(binding = 0) uniform usamplerBuffer data0;
layout(binding = 1) uniform usamplerBuffer data1;
layout(binding = 2) uniform usamplerBuffer data2;
layout(binding = 3) uniform usamplerBuffer data3;
#define LOAD(buf, i) texelFetch(buf, int(i))
#else
layout(std430, binding = 0) readonly restrict buffer Data0 { uvec4 data0[]; };
layout(std430, binding = 1) readonly restrict buffer Data1 { uvec4 data1[]; };
layout(std430, binding = 2) readonly restrict buffer Data2 { uvec4 data2[]; };
layout(std430, binding = 3) readonly restrict buffer Data3 { uvec4 data3[]; };
#define LOAD(buf, i) buf[i]
#endif
layout(std430, binding = 4) writeonly restrict buffer Out { uint sums[]; };

layout(push_constant) uniform Params {
    uint chunk;  // uvec4 elements per workgroup
} p;

// One buffer per loop, the branch outside it: a load that picks its buffer
// per iteration runs several times slower on lavapipe.
#define READ(buf) \
    if (LANE_RUNS) { \
        const uint run = p.chunk / gl_WorkGroupSize.x; \
        const uint first = begin + gl_LocalInvocationID.x * run; \
        for (uint i = 0u; i < run; i++) { acc += LOAD(buf, first + i); } \
    } else { \
        for (uint i = gl_LocalInvocationID.x; i < p.chunk; i += gl_WorkGroupSize.x) { acc += LOAD(buf, begin + i); } \
    }

void main() {
    const uint b = gl_WorkGroupID.y;  // uniform across the workgroup
    const uint begin = gl_WorkGroupID.x * p.chunk;
    uvec4 acc = uvec4(0u);
    if (b == 0u) {
        READ(data0)
    } else if (b == 1u) {
        READ(data1)
    } else if (b == 2u) {
        READ(data2)
    } else {
        READ(data3)
    }
    sums[(b * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x + gl_LocalInvocationID.x] =
        acc.x + acc.y + acc.z + acc.w;
}
