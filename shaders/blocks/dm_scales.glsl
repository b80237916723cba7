// Scales of the 32-element types with an fp16 (d, m) pair per block; value d*q + m.
#ifndef BLOCKS_DM_SCALES_GLSL
#define BLOCKS_DM_SCALES_GLSL
#include "../common.glsl"
vec4 block_scales(uint ib, uint sb) {
    vec2 dm = field_half2(FIELD_OFF_dm, ib);
    return vec4(dm, dm);
}
// 8 blocks at a time: their (d, m) pairs in two 16-byte loads.
struct UnitMeta { uvec4 lo, hi; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(load_w128(FIELD_OFF_dm / 4u + ib0 / 4u), load_w128(FIELD_OFF_dm / 4u + ib0 / 4u + 1u)); }
vec4 meta_scales(UnitMeta m, uint j) {
    vec2 dm = unpackHalf2x16(j < 4u ? m.lo[j] : m.hi[j - 4u]);
    return vec4(dm, dm);
}
#endif
