// IQ2_XXS: d (fp16); qs[64]: per 32-element sub-block two words, the first
// four grid indices (a byte each, 8 values an entry), the second four 7-bit
// sign indices (ksign, one per entry) and a 4-bit scale ls in bits 28..31;
// value d*(0.5+ls)/4*grid*sign.
#define QUANTS_SIGNED
#define GRID_PAIRS
#include "iq_grid.glsl"
Quants block_quants(uint ib, uint sb) {
    uvec2 q = load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb);
    return Quants(uvec4(grid_signed(q.x & 0xFFu, ksign(q.y & 0x7Fu)),
                        grid_signed((q.x >> 8) & 0xFFu, ksign((q.y >> 7) & 0x7Fu))),
                  uvec4(grid_signed((q.x >> 16) & 0xFFu, ksign((q.y >> 14) & 0x7Fu)),
                        grid_signed(q.x >> 24, ksign((q.y >> 21) & 0x7Fu))));
}
vec4 block_scales(uint ib, uint sb) {
    uint ls = load_w32(FIELD_OFF_qs + ib * 16u + 2u * sb + 1u) >> 28;
    float s = field_half(FIELD_OFF_d, ib) * (0.5 + float(ls)) * 0.25;
    return vec4(s, 0.0, s, 0.0);
}
#include "scales_in_quants.glsl"
