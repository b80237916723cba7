// IQ2_S: d (fp16); qs[32]: per 32-element sub-block the low 8 bits of four
// 10-bit grid indices (8 values an entry); signs[32]: a bit per element;
// qh[8] and scales[8] as one 16-byte field `qh_scales`: qh byte sb holds the
// indices' high 2 bits, scales as iq2_scales.glsl.
#define QUANTS_SIGNED
#define GRID_PAIRS
#include "iq_grid.glsl"
Quants block_quants(uint ib, uint sb) {
    uint qs = load_w32(FIELD_OFF_qs + ib * 8u + sb);
    uint signs = load_w32(FIELD_OFF_signs + ib * 8u + sb);
    uint qh = load_w32(FIELD_OFF_qh_scales + ib * 4u + (sb >> 2)) >> (8u * (sb & 3u));
    uvec2 g[4];
    for (uint e = 0u; e < 4u; e++) {
        g[e] = grid_signed(((qs >> (8u * e)) & 0xFFu) | (((qh >> (2u * e)) & 3u) << 8), signs >> (8u * e));
    }
    return Quants(uvec4(g[0], g[1]), uvec4(g[2], g[3]));
}
#define IQ2_SCALES_AT(ib) (FIELD_OFF_qh_scales / 2u + 2u * (ib) + 1u)
#include "iq2_scales.glsl"
