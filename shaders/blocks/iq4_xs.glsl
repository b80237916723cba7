// IQ4_XS: d (fp16), scales_h (u16) and scales_l[4] as one 8-byte field `ds`;
// qs[128]: per 32-element sub-block 16 bytes of nibbles as Q4_0's, each
// indexing IQ4's int8 values. Sub-block sb's scale is 6 bits, low 4 from
// scales_l, high 2 from scales_h; value d*(scale-32)*value.
#ifndef BLOCKS_IQ4_XS_GLSL
#define BLOCKS_IQ4_XS_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "nibble_pairs.glsl"
Quants block_quants(uint ib, uint sb) { return nibble_values(FIELD_OFF_qs, ib * 8u + sb); }
vec4 iq4xs_scales(uvec2 ds, uint sb) {
    uint ls = ((ds.y >> (4u * sb)) & 0xFu) | (((ds.x >> (16u + 2u * sb)) & 3u) << 4);
    float s = unpackHalf2x16(ds.x).x * float(int(ls) - 32);
    return vec4(s, 0.0, s, 0.0);
}
vec4 block_scales(uint ib, uint sb) { return iq4xs_scales(load_w64(FIELD_OFF_ds / 2u + ib), sb); }
// A whole superblock per thread (a unit = its 8 sub-blocks): d and every scale in one load.
struct UnitMeta { uvec2 ds; };
UnitMeta unit_meta(uint ib) { return UnitMeta(load_w64(FIELD_OFF_ds / 2u + ib)); }
vec4 meta_scales(UnitMeta m, uint sb) { return iq4xs_scales(m.ds, sb); }
#endif
