// Q5_0: d (fp16), qh (fifth bits, as a bits1 plane), qs[16]; value d*(q-16).
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h) | (bits1(FIELD_OFF_qh, ib, h) << 4);
}
#define D_ZERO_POINT -16.0
#include "d_scales.glsl"
