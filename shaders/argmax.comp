#version 450
// Greedy sampling on the device: the index of the largest value of each of n
// vectors (one workgroup each), as numpy's argmax picks it: the first of
// equal values, and the first NaN if there is one.
//
// Bindings: 0 x, 1 out (int32 per vector).

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) readonly restrict buffer X { float x[]; };
layout(std430, binding = 1) writeonly restrict buffer Out { int o[]; };

layout(push_constant) uniform Params {
    uint n;  // values per vector
    uint x_off, x_stride;  // first value of vector 0, and floats between vectors
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
shared float best_value[WG_SIZE];
shared uint best_index[WG_SIZE];

// Whether (a, ia) comes before (b, ib) in numpy's order: NaN first, then
// larger values, then lower indices.
bool better(float a, uint ia, float b, uint ib) {
    if (isnan(a) != isnan(b)) {
        return isnan(a);
    }
    if (!isnan(a) && a != b) {
        return a > b;
    }
    return ia < ib;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint xb = p.x_off + gl_WorkGroupID.x * p.x_stride;
    float bv = 0.0;
    uint bi = 0xFFFFFFFFu;  // none yet
    for (uint i = tid; i < p.n; i += WG_SIZE) {
        const float v = x[xb + i];
        if (bi == 0xFFFFFFFFu || better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    best_value[tid] = bv;
    best_index[tid] = bi;
    barrier();
    // Tree reduction; WG_SIZE is a power of two (the host checks).
    for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1) {
        if (tid < s && best_index[tid + s] != 0xFFFFFFFFu
                && (best_index[tid] == 0xFFFFFFFFu
                    || better(best_value[tid + s], best_index[tid + s], best_value[tid], best_index[tid]))) {
            best_value[tid] = best_value[tid + s];
            best_index[tid] = best_index[tid + s];
        }
        barrier();
    }
    if (tid == 0u) {
        o[gl_WorkGroupID.x] = int(best_index[0]);
    }
}
