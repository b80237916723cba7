// Q5_K: Q4_K plus the fifth bits as bits1 planes.
#ifndef BLOCKS_Q5_K_GLSL
#define BLOCKS_Q5_K_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) {
    uint sub = ib * 8u + sb;
    return with_high_bits(nibbles(FIELD_OFF_qs, sub), bits1(FIELD_OFF_qh, sub), 4u);
}
#include "k4_scales.glsl"
#endif
