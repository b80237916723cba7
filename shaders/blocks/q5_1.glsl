// Q5_1: d, m (fp16), qh (fifth bits, as a bits1 plane), qs[16]; value d*q + m.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h) | (bits1(FIELD_OFF_qh, ib, h) << 4);
}
#include "dm_scales.glsl"
