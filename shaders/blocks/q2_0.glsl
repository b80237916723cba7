// Q2_0: d (fp16), qs: 2-bit quants q as a bits2 plane per 32-element sub-block
// (2 sub-blocks a block); value d*(q-1), q-1 in -1..2 (signed bytes: an inf d
// gives +-inf as in ggml).
#define QUANTS_SIGNED
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) { return less_one(bits2(FIELD_OFF_qs, ib * 2u + sb)); }
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, 0.0, d, 0.0);
}
// A unit (8 sub-blocks) is four blocks: their d in one 8-byte load, their 64 bytes of quants in four 16-byte loads.
struct UnitMeta { uvec2 d; Words16 qs; };
UnitMeta unit_meta(uint ib0) {
    return UnitMeta(load_w64(FIELD_OFF_d / 2u + ib0 / 4u), load_words16(FIELD_OFF_qs, ib0 / 4u));
}
vec4 meta_scales(UnitMeta m, uint j) {
    float d = unpackHalf2x16(m.d[j >> 2] >> (16u * ((j >> 1) & 1u))).x;
    return vec4(d, 0.0, d, 0.0);
}
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint j) { return less_one(bits2_of(word_pair_of(m.qs, j))); }
