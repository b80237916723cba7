// Q4_1: d, m (fp16), qs[16]; nibbles as in Q4_0; value d*q + m.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h);
}
#include "dm_scales.glsl"
