// Q6_K: low 4 bits as nibbles and high 2 bits as bits2 planes per sub-block,
// scales[16] int8 (one per 16 elements), d (fp16); value d*sc*(q-32).
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    uint sub = ib * 8u + sb;
    return nibbles(FIELD_OFF_ql, sub, h) | (bits2(FIELD_OFF_qh, sub, h) << 4);
}
vec4 block_scales(uint ib, uint sb) {
    vec2 s = field_half(FIELD_OFF_d, ib) * int8_pair(FIELD_OFF_scales, ib, sb);
    return vec4(s.x, -32.0 * s.x, s.y, -32.0 * s.y);
}
// A whole superblock per thread (a unit = its 8 sub-blocks): the 16 scale bytes in one load.
struct UnitMeta { uvec4 sc; float d; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(w128[FIELD_OFF_scales / 4u + ib], field_half(FIELD_OFF_d, ib));
}
vec4 meta_scales(UnitMeta m, uint sb) {
    vec2 s = m.d * int8_pair_of(m.sc[sb >> 1], sb);
    return vec4(s.x, -32.0 * s.x, s.y, -32.0 * s.y);
}
