// Q3_K: hmask as bits1 planes, qs as bits2 planes, scales unpacked to 16
// int8 (scale - 32), d (fp16). q = low 2 bits | high bit << 2 (0..7);
// value d*(scale-32)*(q-4).
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    uint sub = ib * 8u + sb;
    return bits2(FIELD_OFF_qs, sub, h) | (bits1(FIELD_OFF_hmask, sub, h) << 2);
}
vec4 block_scales(uint ib, uint sb) {
    vec2 s = field_half(FIELD_OFF_d, ib) * int8_pair(FIELD_OFF_scales, ib, sb);
    return vec4(s.x, -4.0 * s.x, s.y, -4.0 * s.y);
}
// A whole superblock per thread (a unit = its 8 sub-blocks): the 16 scale bytes in one load.
struct UnitMeta { uvec4 sc; float d; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(w128[FIELD_OFF_scales / 4u + ib], field_half(FIELD_OFF_d, ib));
}
vec4 meta_scales(UnitMeta m, uint sb) {
    vec2 s = m.d * int8_pair_of(m.sc[sb >> 1], sb);
    return vec4(s.x, -4.0 * s.x, s.y, -4.0 * s.y);
}
