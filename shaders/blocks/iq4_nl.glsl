// IQ4_NL: d (fp16), qs[16] nibbles laid out as Q4_0's; a nibble indexes IQ4's
// 16 int8 values; value d*value.
#ifndef BLOCKS_IQ4_NL_GLSL
#define BLOCKS_IQ4_NL_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "nibble_pairs.glsl"
Quants block_quants(uint ib, uint sb) { return nibble_values(FIELD_OFF_qs, ib); }
#define D_ZERO_POINT 0.0
#include "d_scales.glsl"
#endif
