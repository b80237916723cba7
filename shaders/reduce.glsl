// Sums and maxima over a workgroup, every invocation getting the result.
// REDUCE_SUBGROUP: subgroup arithmetic, then the subgroups' results through
// shared memory; with a workgroup of one subgroup (what
// vkq/llama/vector_ops/common.py launches where subgroup arithmetic exists)
// no barrier runs at all.
// Otherwise a shared-memory tree (WG_SIZE a power of two: the host checks).
// The including shader defines WG_SIZE; every invocation must call these.
#ifndef REDUCE_GLSL
#define REDUCE_GLSL
#ifdef REDUCE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

shared float reduce_partial[WG_SIZE];

// op 0: sum, 1: max.
float combine(float a, float b, uint op) { return op == 0u ? a + b : max(a, b); }

// The reduction over the `width` invocations from `first` (a power of two
// dividing the workgroup, whole subgroups: subgroups are consecutive
// invocations, as on every 1-D workgroup of the drivers vkq runs on), in
// the order a workgroup of `width` takes (workgroup_reduce): the same bits.
float segment_reduce(float x, uint op, uint first, uint width) {
#ifdef REDUCE_SUBGROUP
    x = op == 0u ? subgroupAdd(x) : subgroupMax(x);
    const uint subgroups = width / gl_SubgroupSize;
    if (subgroups <= 1u) {
        return x;
    }
    if (subgroupElect()) {
        reduce_partial[gl_SubgroupID] = x;
    }
    barrier();
    const uint s0 = first / gl_SubgroupSize;
    x = reduce_partial[s0];
    for (uint s = 1u; s < subgroups; s++) {
        x = combine(x, reduce_partial[s0 + s], op);
    }
#else
    const uint tid = gl_LocalInvocationID.x;
    reduce_partial[tid] = x;
    barrier();
    for (uint s = width / 2u; s > 0u; s >>= 1) {
        if (tid - first < s) {
            reduce_partial[tid] = combine(reduce_partial[tid], reduce_partial[tid + s], op);
        }
        barrier();
    }
    x = reduce_partial[first];
#endif
    barrier();  // reduce_partial is reused by the next reduction
    return x;
}

float workgroup_reduce(float x, uint op) { return segment_reduce(x, op, 0u, WG_SIZE); }

float workgroup_sum(float x) { return workgroup_reduce(x, 0u); }
float workgroup_max(float x) { return workgroup_reduce(x, 1u); }
#endif
