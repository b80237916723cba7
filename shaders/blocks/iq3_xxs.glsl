// IQ3_XXS: d (fp16); qs[64]: per 32-element sub-block eight grid indices (a
// byte each, 4 values an entry); sas[32]: per sub-block a word of four 7-bit
// sign indices (ksign, one per 8 values) and a 4-bit scale ls in bits 28..31;
// value d*(0.5+ls)/2*grid*sign.
#ifndef BLOCKS_IQ3_XXS_GLSL
#define BLOCKS_IQ3_XXS_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "iq_grid.glsl"
#include "iq3_grid.glsl"
// Indices are bytes (no ninth bit: qh 0); the signs from the four ksign indices of sas.
Quants iq3xxs_quants(uvec2 q, uint sas) { return iq3_quants(q, 0u, ksigns4(sas)); }
vec4 iq3xxs_scales(float d, uint sas) {
    float s = d * (0.5 + float(sas >> 28)) * 0.5;
    return vec4(s, 0.0, s, 0.0);
}
Quants block_quants(uint ib, uint sb) {
    return iq3xxs_quants(load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb), load_w32(FIELD_OFF_sas + ib * 8u + sb));
}
vec4 block_scales(uint ib, uint sb) {
    return iq3xxs_scales(field_half(FIELD_OFF_d, ib), load_w32(FIELD_OFF_sas + ib * 8u + sb));
}
// A whole superblock per thread: d, its 64 qs and 32 sas bytes in seven loads.
struct UnitMeta { float d; Words16 qs; Words8 sas; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(field_half(FIELD_OFF_d, ib), load_words16(FIELD_OFF_qs, ib), load_words8(FIELD_OFF_sas, ib));
}
vec4 meta_scales(UnitMeta m, uint sb) { return iq3xxs_scales(m.d, word_of(m.sas, sb)); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) { return iq3xxs_quants(word_pair_of(m.qs, sb), word_of(m.sas, sb)); }
#endif
