// Q5_1: d, m (fp16), qh (fifth bits, as a bits1 plane), qs[16]; value d*q + m.
#ifndef BLOCKS_Q5_1_GLSL
#define BLOCKS_Q5_1_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) {
    return with_high_bits(nibbles(FIELD_OFF_qs, ib), bits1(FIELD_OFF_qh, ib), 4u);
}
#include "dm_scales.glsl"
#endif
