// Q4_1: d, m (fp16), qs[16]; nibbles as in Q4_0; value d*q + m.
#ifndef BLOCKS_Q4_1_GLSL
#define BLOCKS_Q4_1_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) { return nibbles(FIELD_OFF_qs, ib); }
#include "dm_scales.glsl"
#endif
