// Q4_0: d (fp16), qs[16]; element j is the low nibble of qs[j], j+16 the high one.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h);
}
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, -8.0 * d, d, -8.0 * d);
}
// 8 blocks at a time: their 8 fp16 scales in one 16-byte load.
struct UnitMeta { uvec4 d; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(w128[FIELD_OFF_d / 4u + ib0 / 8u]); }
vec4 meta_scales(UnitMeta m, uint j) {
    float d = half_of(m.d, j);
    return vec4(d, -8.0 * d, d, -8.0 * d);
}
