#version 450
// Device memory read bandwidth, measured once per `vkq bench` run: the
// reference of its "% bw" column. Each workgroup reads one contiguous chunk
// of a big buffer, its invocations side by side (coalesced on a GPU), with
// 16-byte loads, the widest the mat-vec shaders use. Each invocation writes
// the sum of what it read: the loads cannot be optimized away, and the host
// checks that the whole buffer was read (llvmpipe silently ends a loop after
// about 65535 iterations, so the host keeps the loop short).

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) readonly buffer Data { uvec4 data[]; };
layout(std430, binding = 1) writeonly buffer Out { uint sums[]; };

layout(push_constant) uniform Params {
    uint chunk;  // uvec4 elements per workgroup
} p;

void main() {
    const uint begin = gl_WorkGroupID.x * p.chunk;
    uvec4 acc = uvec4(0u);
    for (uint i = gl_LocalInvocationID.x; i < p.chunk; i += gl_WorkGroupSize.x) {
        acc += data[begin + i];
    }
    sums[gl_GlobalInvocationID.x] = acc.x + acc.y + acc.z + acc.w;
}
