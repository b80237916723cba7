#version 450
// The router of a mixture-of-experts layer (Mixtral's layout): for each of n
// vectors of router logits (one workgroup each), the n_used experts of the
// largest logits in descending order (equal logits: the lower index first;
// a NaN logit counts as -inf), and their weights p / (the sum of the chosen
// p, clamped below at 2^-14 as llama.cpp clamps it), p = softmax over all
// n_expert logits. MUL_MAT_ID then reads the ids.
//
// Why the logits and not p (llama.cpp ranks p; softmax is monotonic, so in
// exact arithmetic the choice is the same): the rounding of each engine's
// float32 exp can reorder logits a few ulps apart, or make them equal, so
// ranking p let this op and the host's `route` (vkq/llama/host.py) choose
// different experts. Comparing the logits themselves is exact: both engines
// choose the same experts, bit for bit, ties included.
//
// The ids are in [0, n_expert) by construction, whatever the logits (NaN
// included): every id is the index of an expert the workgroup scanned, and a
// clamp keeps it so. A NaN logit makes every weight of its vector NaN, so
// that the layer's output is NaN, never a plausible mix. vkq.Graph lets MUL_MAT_ID read ids this op writes for
// that reason (host-written ids are checked on the host instead).
//
// Each invocation owns the experts tid, tid + WG_SIZE, ...: only it reads or
// writes their logits in shared memory, so the selection rounds share
// nothing but the two workgroup reductions that pick each round's expert.
//
// Bindings: 0 logits, 1 ids (int32, n_used per vector), 2 weights (float,
// n_used per vector). Variants: REDUCE_SUBGROUP (reduce.glsl).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

layout(std430, binding = 0) readonly restrict buffer Logits { float logits[]; };
layout(std430, binding = 1) writeonly restrict buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly restrict buffer Weights { float weights[]; };

layout(push_constant) uniform Params {
    uint n_expert;
    uint n_used;
    uint l_off, l_stride;  // the first logit of vector 0, and floats between vectors
} p;

const uint MAX_EXPERTS = 512;  // vkq.llama.config.MAX_EXPERTS
const uint MAX_USED = 64;  // vkq.llama.config.MAX_EXPERTS_USED
const uint WG_SIZE = gl_WorkGroupSize.x;
#include "reduce.glsl"

shared float key[MAX_EXPERTS];  // the logits, NaN as -inf; NaN once chosen
shared float chosen[MAX_USED];  // the chosen experts' p: written and read by invocation 0 only

bool is_nan(float x) { return (floatBitsToUint(x) & 0x7FFFFFFFu) > 0x7F800000u; }

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v = gl_WorkGroupID.x;
    const uint lb = p.l_off + v * p.l_stride;

    float m = -1.0 / 0.0;
    float nan_seen = 0.0;
    for (uint e = tid; e < p.n_expert; e += WG_SIZE) {
        const float l = logits[lb + e];
        key[e] = is_nan(l) ? -1.0 / 0.0 : l;
        nan_seen = is_nan(l) ? 1.0 : nan_seen;
        m = max(m, key[e]);
    }
    m = workgroup_max(m);
    const bool any_nan = workgroup_max(nan_seen) > 0.0;
    float sum = 0.0;
    for (uint e = tid; e < p.n_expert; e += WG_SIZE) {
        sum += exp(key[e] - m);
    }
    const float inv_sum = 1.0 / workgroup_sum(sum);

    float total = 0.0;
    for (uint r = 0u; r < p.n_used; r++) {
        // This invocation's largest logit not yet chosen (the first of equal ones).
        bool found = false;
        float best = -1.0 / 0.0;
        uint best_e = 0u;
        for (uint e = tid; e < p.n_expert; e += WG_SIZE) {
            if (!is_nan(key[e]) && (!found || key[e] > best)) {
                found = true;
                best = key[e];
                best_e = e;
            }
        }
        const float top = workgroup_max(best);
        // The lowest index among the invocations holding the top value (indices are exact in float;
        // -0 == +0, so the two zeros tie as they do on the host).
        const uint e = uint(-workgroup_max(found && best == top ? -float(best_e) : -float(MAX_EXPERTS)));
        const uint id = min(e, p.n_expert - 1u);
        if (id % WG_SIZE == tid) {
            key[id] = uintBitsToFloat(0x7FC00000u);
        }
        if (tid == 0u) {
            // p of the chosen expert, as the sum above took it; NaN in, NaN weights out.
            const float q = any_nan ? uintBitsToFloat(0x7FC00000u) : exp(top - m) * inv_sum;
            ids[v * p.n_used + r] = int(id);
            chosen[r] = q;
            total += q;
        }
    }
    if (tid == 0u) {
        const float scale = max(total, 6.103515625e-5);
        for (uint r = 0u; r < p.n_used; r++) {
            weights[v * p.n_used + r] = chosen[r] / scale;
        }
    }
}
