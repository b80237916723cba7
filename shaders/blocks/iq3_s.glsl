// IQ3_S: d (fp16); qs[64]: per 32-element sub-block the low 8 bits of eight
// 9-bit grid indices (4 values an entry); then qh[8] (bit e of byte sb: entry
// e's high bit), signs[32] (a bit per element) and scales[4] (a 4-bit ls per
// sub-block) as one field `hss`, padded to 48 bytes; value d*(1+2*ls)*grid*sign.
#ifndef BLOCKS_IQ3_S_GLSL
#define BLOCKS_IQ3_S_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "iq3_grid.glsl"
const uint HSS_WORDS = 12u;  // qh at word 0, signs at 2, scales at 10
Quants block_quants(uint ib, uint sb) {
    uint base = FIELD_OFF_hss + ib * HSS_WORDS;
    uint qh = load_w32(base + (sb >> 2)) >> (8u * (sb & 3u));
    return iq3_quants(load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb), qh, load_w32(base + 2u + sb));
}
vec4 iq3s_scales(float d, uint scales, uint sb) {
    float s = d * float(1u + 2u * ((scales >> (4u * sb)) & 0xFu));
    return vec4(s, 0.0, s, 0.0);
}
vec4 block_scales(uint ib, uint sb) {
    return iq3s_scales(field_half(FIELD_OFF_d, ib), load_w32(FIELD_OFF_hss + ib * HSS_WORDS + 10u), sb);
}
// A whole superblock per thread: d, its qs and hss in eight loads. hss[0]:
// qh, then signs of sub-blocks 0 and 1; hss[1]: signs 2..5; hss[2]: signs 6
// and 7, then the scales.
struct UnitMeta { float d; Words16 qs; Words8 hss01; uvec4 hss2; };
UnitMeta unit_meta(uint ib) {
    uint h = (FIELD_OFF_hss + ib * HSS_WORDS) / 4u;
    return UnitMeta(field_half(FIELD_OFF_d, ib), load_words16(FIELD_OFF_qs, ib),
                    Words8(load_w128(h), load_w128(h + 1u)), load_w128(h + 2u));
}
uint meta_hss_word(UnitMeta m, uint w) { return w < 8u ? word_of(m.hss01, w) : m.hss2[w & 3u]; }
vec4 meta_scales(UnitMeta m, uint sb) { return iq3s_scales(m.d, m.hss2.z, sb); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) {
    uint qh = meta_hss_word(m, sb >> 2) >> (8u * (sb & 3u));
    return iq3_quants(word_pair_of(m.qs, sb), qh, meta_hss_word(m, 2u + sb));
}
#endif
