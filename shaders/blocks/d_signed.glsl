// Scales of the types whose value is d*q, q a signed quant (an inf d then
// gives +-inf as in ggml, not the NaN of inf - inf), with an fp16 d per block
// of SUBS = QK/32 sub-blocks (2 to 8) as a field of its own: Q1_0, Q2_0,
// TQ1_0, TQ2_0.
#ifndef BLOCKS_D_SIGNED_GLSL
#define BLOCKS_D_SIGNED_GLSL
#include "../common.glsl"
const uint SUBS = QK / 32u;
vec4 d_alone(float d) { return vec4(d, 0.0, d, 0.0); }
vec4 block_scales(uint ib, uint sb) { return d_alone(field_half(FIELD_OFF_d, ib)); }
// A unit (8 sub-blocks) is 8/SUBS whole blocks: their d's are 8, 4 or 2 bytes,
// one load, unpacked once per unit (so that each sub-block's pick below is
// constant in the unrolled loop).
vec4 unit_d(uint ib0) {
    if (SUBS == 2u) {
        uvec2 w = load_w64(FIELD_OFF_d / 2u + ib0 / 4u);
        return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
    }
    return vec4(unpackHalf2x16(load_w32(FIELD_OFF_d + ib0 / 2u) >> (16u * (ib0 & 1u))), 0.0, 0.0);
}
vec4 unit_scales(vec4 d, uint j) { return d_alone(d[j / SUBS]); }  // j / SUBS: the unit's block of sub-block j
#endif
