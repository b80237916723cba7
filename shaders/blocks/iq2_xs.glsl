// IQ2_XS: d (fp16); qs[32] u16: per 32-element sub-block four (8 bytes),
// each a 9-bit grid index (8 values an entry) and a 7-bit sign index (ksign);
// scales[8] as iq2_scales.glsl.
#define QUANTS_SIGNED
#define GRID_PAIRS
#include "iq_grid.glsl"
uvec2 iq2xs_entry(uint e) { return grid_signed(e & 511u, ksign((e >> 9) & 0x7Fu)); }
Quants block_quants(uint ib, uint sb) {
    uvec2 q = load_w64(FIELD_OFF_qs / 2u + ib * 8u + sb);
    return Quants(uvec4(iq2xs_entry(q.x & 0xFFFFu), iq2xs_entry(q.x >> 16)),
                  uvec4(iq2xs_entry(q.y & 0xFFFFu), iq2xs_entry(q.y >> 16)));
}
#define IQ2_SCALES_AT(ib) (FIELD_OFF_scales / 2u + (ib))
#include "iq2_scales.glsl"
