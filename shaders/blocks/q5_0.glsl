// Q5_0: d (fp16), qh (fifth bits, as a bits1 plane), qs[16]; value d*(q-16).
#ifndef BLOCKS_Q5_0_GLSL
#define BLOCKS_Q5_0_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) {
    return with_high_bits(nibbles(FIELD_OFF_qs, ib), bits1(FIELD_OFF_qh, ib), 4u);
}
#define D_ZERO_POINT -16.0
#include "d_scales.glsl"
#endif
