// Q5_K: Q4_K plus the fifth bits as bits1 planes.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    uint sub = ib * 8u + sb;
    return nibbles(FIELD_OFF_qs, sub, h) | (bits1(FIELD_OFF_qh, sub, h) << 4);
}
#include "k4_scales.glsl"
