// Q1_0: d (fp16), qs: a bit per element, as a bits1 plane per 32-element
// sub-block (4 sub-blocks a block); value d where the bit is set, -d where not:
// the quant is the sign, 2*bit - 1.
#ifndef BLOCKS_Q1_0_GLSL
#define BLOCKS_Q1_0_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "bitplanes.glsl"
#include "d_signed.glsl"
// Of a bits1 word (bitplanes.glsl: bit 4h+w of byte k is element 16h+4w+k):
// each element's bit moved to bit 1 of its byte, less one.
Quants q1_signs(uint q) {
    uvec4 s = uvec4(q << 1, q, q >> 1, q >> 2);
    return less_one(Quants(s & 0x02020202u, (s >> 4) & 0x02020202u));
}
Quants block_quants(uint ib, uint sb) { return q1_signs(load_w32(FIELD_OFF_qs + ib * SUBS + sb)); }
// A unit's d's, and its 32 bytes of bits in two 16-byte loads.
struct UnitMeta { vec4 d; Words8 qs; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(unit_d(ib0), load_words8(FIELD_OFF_qs, ib0 * SUBS / 8u)); }
vec4 meta_scales(UnitMeta m, uint j) { return unit_scales(m.d, j); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint j) { return q1_signs(word_of(m.qs, j)); }
#endif
