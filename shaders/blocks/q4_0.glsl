// Q4_0: d (fp16), qs[16]; element j is the low nibble of qs[j], j+16 the high one.
#ifndef BLOCKS_Q4_0_GLSL
#define BLOCKS_Q4_0_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) { return nibbles(FIELD_OFF_qs, ib); }
#define D_ZERO_POINT -8.0
#include "d_scales.glsl"
#endif
