#version 450
// The router of a mixture-of-experts layer, as llama.cpp's llama layers route
// (Mixtral's layout): for each of n vectors of router logits (one workgroup
// each), the probabilities p = softmax over all n_expert logits, the n_used
// most probable experts in descending order of p (equal p: the lower index
// first), and their weights p / (the sum of the chosen p, clamped below at
// 2^-14 as llama.cpp clamps it). MUL_MAT_ID then reads the ids.
//
// The ids are in [0, n_expert) by construction, whatever the logits (NaN
// included): every id is the index of an expert the workgroup scanned, and a
// clamp keeps it so. Logits that make a NaN probability give NaN weights, so
// that the layer's output is NaN, never a plausible mix. vkq.Graph lets MUL_MAT_ID read ids this op writes for
// that reason (host-written ids are checked on the host instead).
//
// Each invocation owns the experts tid, tid + WG_SIZE, ...: only it reads or
// writes their probabilities, so the selection rounds share nothing but the
// two workgroup reductions that pick each round's expert.
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

shared float prob[MAX_EXPERTS];  // -2 once chosen (probabilities are >= 0, NaN counts as -1)
shared float chosen[MAX_USED];  // written and read by invocation 0 only

bool is_nan(float x) { return (floatBitsToUint(x) & 0x7FFFFFFFu) > 0x7F800000u; }

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v = gl_WorkGroupID.x;
    const uint lb = p.l_off + v * p.l_stride;

    float m = -1.0 / 0.0;
    for (uint e = tid; e < p.n_expert; e += WG_SIZE) {
        prob[e] = logits[lb + e];
        m = max(m, prob[e]);
    }
    m = workgroup_max(m);
    float sum = 0.0;
    for (uint e = tid; e < p.n_expert; e += WG_SIZE) {
        prob[e] = exp(prob[e] - m);
        sum += prob[e];
    }
    const float inv_sum = 1.0 / workgroup_sum(sum);
    for (uint e = tid; e < p.n_expert; e += WG_SIZE) {
        const float q = prob[e] * inv_sum;
        prob[e] = is_nan(q) ? -1.0 : q;
    }

    float total = 0.0;
    for (uint r = 0u; r < p.n_used; r++) {
        // This invocation's best expert not yet chosen (-2: none left here).
        float best = -2.0;
        uint best_e = 0u;
        for (uint e = tid; e < p.n_expert; e += WG_SIZE) {
            if (prob[e] > best) {
                best = prob[e];
                best_e = e;
            }
        }
        const float top = workgroup_max(best);
        // The lowest index among the invocations holding the top value (indices are exact in float).
        const uint e = uint(-workgroup_max(best == top ? -float(best_e) : -float(MAX_EXPERTS)));
        const uint id = min(e, p.n_expert - 1u);
        if (id % WG_SIZE == tid) {
            prob[id] = -2.0;
        }
        if (tid == 0u) {
            ids[v * p.n_used + r] = int(id);
            chosen[r] = top >= 0.0 ? top : uintBitsToFloat(0x7FC00000u);  // NaN in, NaN weights out
            total += chosen[r];
        }
    }
    if (tid == 0u) {
        const float scale = max(total, 6.103515625e-5);
        for (uint r = 0u; r < p.n_used; r++) {
            weights[v * p.n_used + r] = chosen[r] / scale;
        }
    }
}
