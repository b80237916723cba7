// IQ2_XS: d (fp16); qs[32] u16: per 32-element sub-block four (8 bytes),
// each a 9-bit grid index (8 values an entry) and a 7-bit sign index (ksign);
// scales[8] as iq2_scales.glsl.
#ifndef BLOCKS_IQ2_XS_GLSL
#define BLOCKS_IQ2_XS_GLSL
#define QUANTS_SIGNED
#define GRID_PAIRS
#include "../common.glsl"
#include "iq_grid.glsl"
Quants iq2xs_quants(uvec2 q) {
    // the four sign indices (bits 9..15 of each u16) into bytes 0..3
    uint s = ksign_bytes(((q.x >> 9) & 0x7Fu) | ((q.x >> 17) & 0x7F00u) | ((q.y << 7) & 0x7F0000u)
                         | ((q.y >> 1) & 0x7F000000u));
    return Quants(uvec4(grid_signed(q.x & 511u, s), grid_signed((q.x >> 16) & 511u, s >> 8)),
                  uvec4(grid_signed(q.y & 511u, s >> 16), grid_signed((q.y >> 16) & 511u, s >> 24)));
}
Quants block_quants(uint ib, uint sb) { return iq2xs_quants(load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb)); }
#define IQ2_SCALES_AT(ib) (FIELD_OFF_scales / 2u + (ib))
#include "iq2_scales.glsl"
// A whole superblock per thread: d, its scales and its 64 qs bytes in six loads.
struct UnitMeta { float d; uvec2 sc; Words16 qs; };
UnitMeta unit_meta(uint ib) {
    return UnitMeta(field_half(FIELD_OFF_d, ib), load_w64(IQ2_SCALES_AT(ib)), load_words16(FIELD_OFF_qs, ib));
}
vec4 meta_scales(UnitMeta m, uint sb) { return iq2_scales(m.d, iq2_scale_byte(m.sc, sb)); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) { return iq2xs_quants(word_pair_of(m.qs, sb)); }
#endif
