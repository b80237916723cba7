// Q8_0: d (fp16), qs[32] int8; value d*q.
#define QUANTS_SIGNED
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return w128[FIELD_OFF_qs / 4u + 2u * ib + h];
}
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, 0.0, d, 0.0);
}
// 8 blocks at a time: their 8 fp16 scales in one 16-byte load.
struct UnitMeta { uvec4 d; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(w128[FIELD_OFF_d / 4u + ib0 / 8u]); }
vec4 meta_scales(UnitMeta m, uint j) {
    float d = half_of(m.d, j);
    return vec4(d, 0.0, d, 0.0);
}
