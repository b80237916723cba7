// Q8_0: d (fp16), qs[32] int8; value d*q.
#ifndef BLOCKS_Q8_0_GLSL
#define BLOCKS_Q8_0_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
Quants block_quants(uint ib, uint sb) {
    return Quants(load_w128(FIELD_OFF_qs / 4u + 2u * ib), load_w128(FIELD_OFF_qs / 4u + 2u * ib + 1u));
}
#define D_ZERO_POINT 0.0
#include "d_scales.glsl"
#endif
