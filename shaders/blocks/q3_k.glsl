// Q3_K: hmask as bits1 planes, qs as bits2 planes, scales unpacked to 16
// int8 (scale - 32), d (fp16). q = low 2 bits | high bit << 2 (0..7);
// value d*(scale-32)*(q-4).
#ifndef BLOCKS_Q3_K_GLSL
#define BLOCKS_Q3_K_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) {
    uint sub = ib * 8u + sb;
    return with_high_bits(bits2(FIELD_OFF_qs, sub), bits1(FIELD_OFF_hmask, sub), 2u);
}
#define Q_ZERO_POINT -4.0
#include "int8_scales.glsl"
#endif
