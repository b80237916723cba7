// Sums and maxima over a workgroup, every invocation getting the result.
// REDUCE_SUBGROUP: subgroup arithmetic, then the subgroups' results through
// shared memory; with a workgroup of one subgroup (what vkq/llama/vector_ops.py
// launches where subgroup arithmetic exists) no barrier runs at all.
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

float workgroup_reduce(float x, uint op) {
#ifdef REDUCE_SUBGROUP
    x = op == 0u ? subgroupAdd(x) : subgroupMax(x);
    if (gl_NumSubgroups == 1u) {
        return x;
    }
    if (subgroupElect()) {
        reduce_partial[gl_SubgroupID] = x;
    }
    barrier();
    x = reduce_partial[0];
    for (uint s = 1u; s < gl_NumSubgroups; s++) {
        x = combine(x, reduce_partial[s], op);
    }
#else
    const uint tid = gl_LocalInvocationID.x;
    reduce_partial[tid] = x;
    barrier();
    for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            reduce_partial[tid] = combine(reduce_partial[tid], reduce_partial[tid + s], op);
        }
        barrier();
    }
    x = reduce_partial[0];
#endif
    barrier();  // reduce_partial is reused by the next reduction
    return x;
}

float workgroup_sum(float x) { return workgroup_reduce(x, 0u); }
float workgroup_max(float x) { return workgroup_reduce(x, 1u); }
#endif
