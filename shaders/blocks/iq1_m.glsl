// IQ1_M: qs[32]: per 32-element sub-block the low 8 bits of four 11-bit grid
// indices; qh[16]: per entry a nibble, bits 0..2 the index's high bits, bit 3
// the sign of its delta; scales[8] (4 u16): a 3-bit ls per 16 elements in
// bits 0..11 of each, and d (fp16) from their top nibbles;
// value d*(2*ls+1)*(g + delta).
#ifndef BLOCKS_IQ1_M_GLSL
#define BLOCKS_IQ1_M_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "bitplanes.glsl"
#include "iq1_grid.glsl"
// qh: a nibble per entry, its index's high bits, then the sign of its delta.
Quants iq1m_quants(uint qs, uint qh) {
    uint negative = ((qh >> 3) & 1u) | ((qh >> 6) & 2u) | ((qh >> 9) & 4u) | ((qh >> 12) & 8u);
    return iq1_quants(qs, qh, 4u, negative);
}
Quants block_quants(uint ib, uint sb) { return iq1m_quants(load_w32(FIELD_OFF_qs + ib * 8u + sb), byte_pair(FIELD_OFF_qh, ib, sb)); }
vec4 iq1m_scales(uvec2 sc, uint sb) {
    uint d16 = ((sc.x >> 12) & 0xFu) | ((sc.x >> 24) & 0xF0u) | ((sc.y >> 4) & 0xF00u) | ((sc.y >> 16) & 0xF000u);
    float d = unpackHalf2x16(d16).x * 0.125;
    uint w = sc[sb >> 2] >> (16u * ((sb >> 1) & 1u) + 6u * (sb & 1u));
    return vec4(d * float(2u * (w & 7u) + 1u), 0.0, d * float(2u * ((w >> 3) & 7u) + 1u), 0.0);
}
vec4 block_scales(uint ib, uint sb) { return iq1m_scales(load_w64(FIELD_OFF_scales / 2u + ib), sb); }
// A whole superblock per thread: its scales (and d), qs and qh in four loads.
struct UnitMeta { uvec2 sc; Words8 qs; uvec4 qh; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(load_w64(FIELD_OFF_scales / 2u + ib), load_words8(FIELD_OFF_qs, ib), load_w128(FIELD_OFF_qh / 4u + ib));
}
vec4 meta_scales(UnitMeta m, uint sb) { return iq1m_scales(m.sc, sb); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) {
    return iq1m_quants(word_of(m.qs, sb), m.qh[sb >> 1] >> (16u * (sb & 1u)));
}
#endif
