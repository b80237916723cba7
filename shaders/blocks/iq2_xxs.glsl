// IQ2_XXS: d (fp16); qs[64]: per 32-element sub-block two words, the first
// four grid indices (a byte each, 8 values an entry), the second four 7-bit
// sign indices (ksign, one per entry) and a 4-bit scale ls in bits 28..31;
// value d*(0.5+ls)/4*grid*sign.
#ifndef BLOCKS_IQ2_XXS_GLSL
#define BLOCKS_IQ2_XXS_GLSL
#define QUANTS_SIGNED
#define GRID_PAIRS
#include "../common.glsl"
#include "iq_grid.glsl"
Quants iq2xxs_quants(uvec2 q) {
    uint s = ksigns4(q.y);  // entry e's signs in byte e
    return Quants(uvec4(grid_signed(q.x & 0xFFu, s), grid_signed((q.x >> 8) & 0xFFu, s >> 8)),
                  uvec4(grid_signed((q.x >> 16) & 0xFFu, s >> 16), grid_signed(q.x >> 24, s >> 24)));
}
vec4 iq2xxs_scales(float d, uint q_y) {
    float s = d * (0.5 + float(q_y >> 28)) * 0.25;
    return vec4(s, 0.0, s, 0.0);
}
Quants block_quants(uint ib, uint sb) { return iq2xxs_quants(load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb)); }
vec4 block_scales(uint ib, uint sb) {
    return iq2xxs_scales(field_half(FIELD_OFF_d, ib), load_w32(FIELD_OFF_qs + ib * 16u + 2u * sb + 1u));
}
// A whole superblock per thread: d and its 64 qs bytes in five loads.
struct UnitMeta { float d; Words16 qs; };
UnitMeta unit_meta(uint ib) { return UnitMeta(field_half(FIELD_OFF_d, ib), load_words16(FIELD_OFF_qs, ib)); }
vec4 meta_scales(UnitMeta m, uint sb) { return iq2xxs_scales(m.d, word_pair_of(m.qs, sb).y); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) { return iq2xxs_quants(word_pair_of(m.qs, sb)); }
#endif
