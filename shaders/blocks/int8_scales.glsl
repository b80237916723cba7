// Scales of the k-quants with an int8 scale per 16 elements and one fp16 d per
// superblock (Q3_K, Q6_K): value d*sc*(q + Q_ZERO_POINT), Q_ZERO_POINT defined
// by the including type.
#ifndef BLOCKS_INT8_SCALES_GLSL
#define BLOCKS_INT8_SCALES_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
vec4 block_scales(uint ib, uint sb) {
    vec2 s = field_half(FIELD_OFF_d, ib) * int8_pair(FIELD_OFF_scales, ib, sb);
    return vec4(s.x, Q_ZERO_POINT * s.x, s.y, Q_ZERO_POINT * s.y);
}
// A whole superblock per thread (a unit = its 8 sub-blocks): the 16 scale bytes in one load.
struct UnitMeta { uvec4 sc; float d; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(load_w128(FIELD_OFF_scales / 4u + ib), field_half(FIELD_OFF_d, ib));
}
vec4 meta_scales(UnitMeta m, uint sb) {
    vec2 s = m.d * int8_pair_of(m.sc[sb >> 1], sb);
    return vec4(s.x, Q_ZERO_POINT * s.x, s.y, Q_ZERO_POINT * s.y);
}
#endif
