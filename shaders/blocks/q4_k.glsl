// Q4_K: d, dmin (fp16), (scale, min) byte pairs per sub-block (unpacked from
// the 6-bit packing), qs as nibbles per sub-block; value d*sc*q - dmin*m.
#ifndef BLOCKS_Q4_K_GLSL
#define BLOCKS_Q4_K_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) { return nibbles(FIELD_OFF_qs, ib * 8u + sb); }
#include "k4_scales.glsl"
#endif
