#version 450
// Groups MUL_MAT_ID's used-expert slots by expert, for the tiled mat-mat
// (mul_mm.comp's MUL_MAT_ID): a counting sort that keeps slot order.
//
// In: ids, one expert per slot (binding 0; its length is the slot count).
// Out (binding 1, uint): groups[e] = the slots of expert e, for e < N_EXPERT;
// then from N_EXPERT on the slots sorted by expert, each expert's in slot
// order: expert e's start at N_EXPERT + (the slots of the experts before it).
//
// Workgroup e handles expert e: each invocation takes a contiguous run of
// the slots and counts those of experts below e and those of e; after a
// barrier it adds up the runs' counts (all of them: where e's slots start;
// the runs before its own: where its own slots of e go) and writes its
// slots of e there in order. Deterministic: no atomics. An id outside
// [0, N_EXPERT) is no expert's: its slot is in no group (the host refuses
// such ids before they get here).

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint N_EXPERT = 1;

layout(std430, binding = 0) readonly restrict buffer Ids { int ids[]; };
layout(std430, binding = 1) writeonly restrict buffer Groups { uint groups[]; };

const uint WG_SIZE = gl_WorkGroupSize.x;
shared uint run_below[WG_SIZE];  // per run: its slots of experts below e
shared uint run_same[WG_SIZE];  // per run: its slots of e

void main() {
    const uint e = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    const uint n_slots = uint(ids.length());
    const uint run = (n_slots + WG_SIZE - 1u) / WG_SIZE;
    const uint s0 = min(tid * run, n_slots), s1 = min(s0 + run, n_slots);
    uint below = 0u, same = 0u;
    for (uint s = s0; s < s1; s++) {
        const uint id = uint(ids[s]);  // (a negative id is a large uint: no expert's)
        below += id < e ? 1u : 0u;
        same += id == e ? 1u : 0u;
    }
    run_below[tid] = below;
    run_same[tid] = same;
    barrier();
    uint start = N_EXPERT, rank = 0u, total = 0u;
    for (uint t = 0u; t < WG_SIZE; t++) {
        start += run_below[t];
        rank += t < tid ? run_same[t] : 0u;
        total += run_same[t];
    }
    if (tid == 0u) {
        groups[e] = total;
    }
    for (uint s = s0; s < s1; s++) {
        if (uint(ids[s]) == e) {
            groups[start + rank] = s;
            rank++;
        }
    }
}
