#version 450
// Greedy sampling on the device: the index of the largest value of each of n
// vectors, as numpy's argmax picks it: the first of equal values, and the
// first NaN if there is one.
//
// PASS (specialization constant 1) 0: one workgroup per vector takes all of
// it (a CPU driver's launch). On a GPU one workgroup over a vocabulary of
// 49k-128k values leaves the device idle for hundreds of microseconds
// (235 us on an H200, 2026-11-26), so there pass 1 splits each vector into
// `parts` ranges, workgroup (part, vector) writing its range's best (value,
// index) to the scratch, and pass 2, one workgroup per vector, picks the
// best of the parts by the same order: the same index as one pass.
// With FOLD (specialization constant 2) pass 1 does pass 2 itself: each
// workgroup, its part's best written, draws a ticket from its vector's
// counter in the scratch, and the one that draws the last picks the best
// of the parts as pass 2 does (one workgroup of the same width, the parts
// in the same order: the same index), then sets the counter back to 0 for
// the next dispatch (the scratch starts at zeros). One dispatch, no barrier.
//
// Bindings: 0 x, 1 out (int32 per vector), 2 scratch ((value bits, index)
// per part and vector, then with FOLD a counter per vector).

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint PASS = 0;
layout(constant_id = 2) const bool FOLD = false;

layout(std430, binding = 0) readonly restrict buffer X { float x[]; };
layout(std430, binding = 1) writeonly restrict buffer Out { int o[]; };
// (coherent: with FOLD another workgroup of the same dispatch reads the parts)
layout(std430, binding = 2) coherent buffer Scratch { uvec2 partial[]; };
layout(std430, binding = 2) coherent buffer Tickets { uint tickets[]; };

layout(push_constant) uniform Params {
    uint n;  // values per vector
    uint x_off, x_stride;  // first value of vector 0, and floats between vectors
    uint parts;  // ranges per vector in pass 1
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
const uint NONE = 0xFFFFFFFFu;
shared float best_value[WG_SIZE];
shared uint best_index[WG_SIZE];
shared bool last_part;  // FOLD: this workgroup drew the last ticket

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

// The workgroup's best of the candidates each invocation brings (index NONE: none).
void reduce(float bv, uint bi) {
    const uint tid = gl_LocalInvocationID.x;
    best_value[tid] = bv;
    best_index[tid] = bi;
    barrier();
    // Tree reduction; WG_SIZE is a power of two (the host checks).
    for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1) {
        if (tid < s && best_index[tid + s] != NONE
                && (best_index[tid] == NONE
                    || better(best_value[tid + s], best_index[tid + s], best_value[tid], best_index[tid]))) {
            best_value[tid] = best_value[tid + s];
            best_index[tid] = best_index[tid + s];
        }
        barrier();
    }
}

// Pass 2 of vector v: the workgroup's best of its parts' results, in part order.
void best_of_parts(uint v) {
    const uint tid = gl_LocalInvocationID.x;
    float bv = 0.0;
    uint bi = NONE;
    for (uint part = tid; part < p.parts; part += WG_SIZE) {
        const uvec2 c = partial[v * p.parts + part];
        if (c.y != NONE && (bi == NONE || better(uintBitsToFloat(c.x), c.y, bv, bi))) {
            bv = uintBitsToFloat(c.x);
            bi = c.y;
        }
    }
    reduce(bv, bi);
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v = PASS == 1u ? gl_WorkGroupID.y : gl_WorkGroupID.x;
    if (PASS == 2u) {
        best_of_parts(v);
        if (tid == 0u) {
            o[v] = int(best_index[0]);
        }
        return;
    }
    float bv = 0.0;
    uint bi = NONE;
    const uint xb = p.x_off + v * p.x_stride;
    const uint span = PASS == 1u ? (p.n + p.parts - 1u) / p.parts : p.n;
    const uint i0 = PASS == 1u ? gl_WorkGroupID.x * span : 0u;
    const uint i1 = min(i0 + span, p.n);
    for (uint i = i0 + tid; i < i1; i += WG_SIZE) {
        const float val = x[xb + i];
        if (bi == NONE || better(val, i, bv, bi)) {
            bv = val;
            bi = i;
        }
    }
    reduce(bv, bi);
    if (tid == 0u) {
        if (PASS == 1u) {
            partial[v * p.parts + gl_WorkGroupID.x] = uvec2(floatBitsToUint(best_value[0]), best_index[0]);
            if (FOLD) {
                memoryBarrierBuffer();  // the part's result out before its ticket
                const uint at = 2u * gl_NumWorkGroups.y * p.parts + v;
                last_part = atomicAdd(tickets[at], 1u) == p.parts - 1u;
                if (last_part) {
                    atomicExchange(tickets[at], 0u);
                }
            }
        } else {
            o[v] = int(best_index[0]);
        }
    }
    if (FOLD && PASS == 1u) {
        memoryBarrierShared();
        barrier();
        if (!last_part) {
            return;  // (the whole workgroup)
        }
        memoryBarrierBuffer();
        best_of_parts(v);
        if (tid == 0u) {
            o[v] = int(best_index[0]);
        }
    }
}
