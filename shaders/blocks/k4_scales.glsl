// Q4_K / Q5_K scales: d, dmin (fp16) and a (scale, min) byte pair per sub-block;
// value d*sc*q - dmin*m.
#ifndef BLOCKS_K4_SCALES_GLSL
#define BLOCKS_K4_SCALES_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
vec4 block_scales(uint ib, uint sb) {
    uint w = byte_pair(FIELD_OFF_scales, ib, sb);
    vec2 dm = field_half2(FIELD_OFF_dm, ib);
    vec2 so = vec2(dm.x * float(w & 0xFFu), -dm.y * float((w >> 8) & 0xFFu));
    return vec4(so, so);
}
// A whole superblock per thread (a unit = its 8 sub-blocks): the 8 (scale, min) pairs in one load.
struct UnitMeta { uvec4 sc; vec2 dm; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(load_w128(FIELD_OFF_scales / 4u + ib), field_half2(FIELD_OFF_dm, ib));
}
vec4 meta_scales(UnitMeta m, uint sb) {
    uint w = m.sc[sb >> 1] >> (16u * (sb & 1u));
    vec2 so = vec2(m.dm.x * float(w & 0xFFu), -m.dm.y * float((w >> 8) & 0xFFu));
    return vec4(so, so);
}
#endif
