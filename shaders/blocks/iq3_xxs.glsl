// IQ3_XXS: d (fp16); qs[64]: per 32-element sub-block eight grid indices (a
// byte each, 4 values an entry); sas[32]: per sub-block a word of four 7-bit
// sign indices (ksign, one per 8 values) and a 4-bit scale ls in bits 28..31;
// value d*(0.5+ls)/2*grid*sign.
#define QUANTS_SIGNED
#include "iq_grid.glsl"
Quants block_quants(uint ib, uint sb) {
    uvec2 q = load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb);
    uint sas = load_w32(FIELD_OFF_sas + ib * 8u + sb);
    uint w[8];
    for (uint e = 0u; e < 8u; e++) {
        uint s = ksign((sas >> (7u * (e >> 1))) & 0x7Fu) >> (4u * (e & 1u));
        w[e] = grid_signed((q[e >> 2] >> (8u * (e & 3u))) & 0xFFu, s);
    }
    return Quants(uvec4(w[0], w[1], w[2], w[3]), uvec4(w[4], w[5], w[6], w[7]));
}
vec4 block_scales(uint ib, uint sb) {
    uint ls = load_w32(FIELD_OFF_sas + ib * 8u + sb) >> 28;
    float s = field_half(FIELD_OFF_d, ib) * (0.5 + float(ls)) * 0.5;
    return vec4(s, 0.0, s, 0.0);
}
#include "scales_in_quants.glsl"
