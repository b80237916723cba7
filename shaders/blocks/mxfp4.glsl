// MXFP4: e (E8M0 shared exponent), qs[16] of e2m1 nibbles laid out as Q4_0.
// The quant is the doubled e2m1 value (an integer in -12..12, from the table
// E2M1_PAIRS) and the scale 2^(e-128) (half of 2^(e-127), which undoes the doubling).
#ifndef BLOCKS_MXFP4_GLSL
#define BLOCKS_MXFP4_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "nibble_pairs.glsl"
Quants block_quants(uint ib, uint sb) { return nibble_values(FIELD_OFF_qs, ib); }
float e8m0_half(uint e) {
    // 2^(e-128) exactly, as a denormal for e < 2
    return uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23));
}
vec4 block_scales(uint ib, uint sb) {
    float s = e8m0_half(field_byte(FIELD_OFF_e, ib));
    return vec4(s, 0.0, s, 0.0);
}
// 8 blocks at a time: their exponent bytes in two word loads.
struct UnitMeta { uvec2 e; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(uvec2(load_w32(FIELD_OFF_e + ib0 / 4u), load_w32(FIELD_OFF_e + ib0 / 4u + 1u))); }
vec4 meta_scales(UnitMeta m, uint j) {
    float s = e8m0_half(bitfieldExtract(m.e[j >> 2], int(8u * (j & 3u)), 8));
    return vec4(s, 0.0, s, 0.0);
}
#endif
