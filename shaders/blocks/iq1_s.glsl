// IQ1_S: d (fp16); qs[32]: per 32-element sub-block the low 8 bits of four
// 11-bit grid indices; qh[8] u16, one per sub-block: bits 3e..3e+2 entry e's
// high bits, 12..14 a scale ls, 15 the sign of delta;
// value d*(2*ls+1)*(g + delta).
#ifndef BLOCKS_IQ1_S_GLSL
#define BLOCKS_IQ1_S_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "bitplanes.glsl"
#include "iq1_grid.glsl"
// qh: the sub-block's u16 (entries' high bits, scale, delta's sign).
Quants iq1s_quants(uint qs, uint qh) { return iq1_quants(qs, qh, 3u, (qh & 0x8000u) != 0u ? 0xFu : 0u); }
Quants block_quants(uint ib, uint sb) { return iq1s_quants(load_w32(FIELD_OFF_qs + ib * 8u + sb), byte_pair(FIELD_OFF_qh, ib, sb)); }
vec4 iq1s_scales(float d, uint qh) {
    float s = d * float(2u * ((qh >> 12) & 7u) + 1u) * 0.125;
    return vec4(s, 0.0, s, 0.0);
}
vec4 block_scales(uint ib, uint sb) { return iq1s_scales(field_half(FIELD_OFF_d, ib), byte_pair(FIELD_OFF_qh, ib, sb)); }
// A whole superblock per thread: d, its 8 qh and its 32 qs bytes in four loads.
struct UnitMeta { float d; uvec4 qh; Words8 qs; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(field_half(FIELD_OFF_d, ib), load_w128(FIELD_OFF_qh / 4u + ib), load_words8(FIELD_OFF_qs, ib));
}
uint meta_qh(UnitMeta m, uint sb) { return m.qh[sb >> 1] >> (16u * (sb & 1u)); }
vec4 meta_scales(UnitMeta m, uint sb) { return iq1s_scales(m.d, meta_qh(m, sb)); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) { return iq1s_quants(word_of(m.qs, sb), meta_qh(m, sb)); }
#endif
