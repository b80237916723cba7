// Q2_K: scales[16] (per 16 elements: low nibble scale, high nibble min),
// qs as bits2 planes, d and dmin (fp16); value d*(sc&15)*q - dmin*(sc>>4).
#ifndef BLOCKS_Q2_K_GLSL
#define BLOCKS_Q2_K_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) { return bits2(FIELD_OFF_qs, ib * 8u + sb); }
vec4 block_scales(uint ib, uint sb) {
    uint w = byte_pair(FIELD_OFF_scales, ib, sb);
    vec2 dm = field_half2(FIELD_OFF_dm, ib);
    return vec4(dm.x * float(w & 0xFu), -dm.y * float((w >> 4) & 0xFu),
                dm.x * float((w >> 8) & 0xFu), -dm.y * float((w >> 12) & 0xFu));
}
// A whole superblock per thread (a unit = its 8 sub-blocks): the 16 scale bytes in one load.
struct UnitMeta { uvec4 sc; vec2 dm; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(load_w128(FIELD_OFF_scales / 4u + ib), field_half2(FIELD_OFF_dm, ib));
}
vec4 meta_scales(UnitMeta m, uint sb) {
    uint w = m.sc[sb >> 1] >> (16u * (sb & 1u));
    return vec4(m.dm.x * float(w & 0xFu), -m.dm.y * float((w >> 4) & 0xFu),
                m.dm.x * float((w >> 8) & 0xFu), -m.dm.y * float((w >> 12) & 0xFu));
}
#endif
