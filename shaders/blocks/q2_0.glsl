// Q2_0: d (fp16), qs: 2-bit quants q as bits2 planes per 32-element sub-block
// (2 sub-blocks a block); value d*(q-1), q-1 in -1..2. TQ2_0 is the same on
// the device with 256-element blocks (tq2_0.glsl).
#ifndef BLOCKS_Q2_0_GLSL
#define BLOCKS_Q2_0_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "bitplanes.glsl"
#include "d_signed.glsl"
Quants block_quants(uint ib, uint sb) { return less_one(bits2(FIELD_OFF_qs, ib * SUBS + sb)); }
// A unit's d's, and its 64 bytes of quants in four 16-byte loads.
struct UnitMeta { vec4 d; Words16 qs; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(unit_d(ib0), load_words16(FIELD_OFF_qs, ib0 * SUBS / 8u)); }
vec4 meta_scales(UnitMeta m, uint j) { return unit_scales(m.d, j); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint j) { return less_one(bits2_of(word_pair_of(m.qs, j))); }
#endif
