// IQ2_S: d (fp16); qs[32]: per 32-element sub-block the low 8 bits of four
// 10-bit grid indices (8 values an entry); signs[32]: a bit per element;
// qh[8] and scales[8] as one 16-byte field `qh_scales`: qh byte sb holds the
// indices' high 2 bits, scales as iq2_scales.glsl.
#ifndef BLOCKS_IQ2_S_GLSL
#define BLOCKS_IQ2_S_GLSL
#define QUANTS_SIGNED
#define GRID_PAIRS
#include "../common.glsl"
#include "iq_grid.glsl"
// Entry e (0..3) of a sub-block: index byte e of qs with bits 2e..2e+1 of qh above it.
uvec2 iq2s_entry(uint qs, uint qh, uint signs, uint e) {
    return grid_signed(((qs >> (8u * e)) & 0xFFu) | (((qh >> (2u * e)) & 3u) << 8), signs >> (8u * e));
}
Quants iq2s_quants(uint qs, uint qh, uint signs) {
    return Quants(uvec4(iq2s_entry(qs, qh, signs, 0u), iq2s_entry(qs, qh, signs, 1u)),
                  uvec4(iq2s_entry(qs, qh, signs, 2u), iq2s_entry(qs, qh, signs, 3u)));
}
Quants block_quants(uint ib, uint sb) {
    uint qh = load_w32(FIELD_OFF_qh_scales + ib * 4u + (sb >> 2)) >> (8u * (sb & 3u));
    return iq2s_quants(load_w32(FIELD_OFF_qs + ib * 8u + sb), qh, load_w32(FIELD_OFF_signs + ib * 8u + sb));
}
#define IQ2_SCALES_AT(ib) (FIELD_OFF_qh_scales / 2u + 2u * (ib) + 1u)
#include "iq2_scales.glsl"
// A whole superblock per thread: d and its qs, signs, qh and scales in six loads.
struct UnitMeta { float d; Words8 qs, signs; uvec4 qh_scales; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(field_half(FIELD_OFF_d, ib), load_words8(FIELD_OFF_qs, ib), load_words8(FIELD_OFF_signs, ib),
                    load_w128(FIELD_OFF_qh_scales / 4u + ib));
}
vec4 meta_scales(UnitMeta m, uint sb) { return iq2_scales(m.d, iq2_scale_byte(m.qh_scales.zw, sb)); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) {
    uint qh = m.qh_scales[sb >> 2] >> (8u * (sb & 3u));
    return iq2s_quants(word_of(m.qs, sb), qh, word_of(m.signs, sb));
}
#endif
