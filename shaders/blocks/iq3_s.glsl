// IQ3_S: d (fp16); qs[64]: per 32-element sub-block the low 8 bits of eight
// 9-bit grid indices (4 values an entry); then qh[8] (bit e of byte sb: entry
// e's high bit), signs[32] (a bit per element) and scales[4] (a 4-bit ls per
// sub-block) as one 44-byte field `hss`; value d*(1+2*ls)*grid*sign.
#define QUANTS_SIGNED
#include "iq_grid.glsl"
const uint HSS_WORDS = 11u;  // qh at word 0, signs at 2, scales at 10
Quants block_quants(uint ib, uint sb) {
    uvec2 q = load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb);
    uint base = FIELD_OFF_hss + ib * HSS_WORDS;
    uint qh = load_w32(base + (sb >> 2)) >> (8u * (sb & 3u));
    uint signs = load_w32(base + 2u + sb);
    uint w[8];
    for (uint e = 0u; e < 8u; e++) {
        w[e] = grid_signed(((q[e >> 2] >> (8u * (e & 3u))) & 0xFFu) | (((qh >> e) & 1u) << 8), signs >> (4u * e));
    }
    return Quants(uvec4(w[0], w[1], w[2], w[3]), uvec4(w[4], w[5], w[6], w[7]));
}
vec4 iq3s_scales(float d, uint scales, uint sb) {
    float s = d * float(1u + 2u * ((scales >> (4u * sb)) & 0xFu));
    return vec4(s, 0.0, s, 0.0);
}
vec4 block_scales(uint ib, uint sb) {
    return iq3s_scales(field_half(FIELD_OFF_d, ib), load_w32(FIELD_OFF_hss + ib * HSS_WORDS + 10u), sb);
}
// A whole superblock per thread: d and the scales word.
struct UnitMeta { float d; uint scales; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(field_half(FIELD_OFF_d, ib), load_w32(FIELD_OFF_hss + ib * HSS_WORDS + 10u));
}
vec4 meta_scales(UnitMeta m, uint sb) { return iq3s_scales(m.d, m.scales, sb); }
