// Scales of the 32-element types with one fp16 d per block: value d*(q + D_ZERO_POINT),
// D_ZERO_POINT defined by the including type (-8 for Q4_0, -16 for Q5_0, 0 for Q8_0).
#ifndef BLOCKS_D_SCALES_GLSL
#define BLOCKS_D_SCALES_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, D_ZERO_POINT * d, d, D_ZERO_POINT * d);
}
// 8 blocks at a time: their 8 fp16 scales in one 16-byte load.
struct UnitMeta { uvec4 d; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(load_w128(FIELD_OFF_d / 4u + ib0 / 8u)); }
vec4 meta_scales(UnitMeta m, uint j) {
    float d = half_of(m.d, j);
    return vec4(d, D_ZERO_POINT * d, d, D_ZERO_POINT * d);
}
#endif
