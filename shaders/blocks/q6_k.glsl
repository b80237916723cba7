// Q6_K: low 4 bits as nibbles and high 2 bits as bits2 planes per sub-block,
// scales[16] int8 (one per 16 elements), d (fp16); value d*sc*(q-32).
#ifndef BLOCKS_Q6_K_GLSL
#define BLOCKS_Q6_K_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) {
    uint sub = ib * 8u + sb;
    return with_high_bits(nibbles(FIELD_OFF_ql, sub), bits2(FIELD_OFF_qh, sub), 4u);
}
#define Q_ZERO_POINT -32.0
#include "int8_scales.glsl"
#endif
