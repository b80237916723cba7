// Q8_0: d (fp16), qs[32] int8; value d*q.
#define QUANTS_SIGNED
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return w128[FIELD_OFF_qs / 4u + 2u * ib + h];
}
#define D_ZERO_POINT 0.0
#include "d_scales.glsl"
