// Q4_1: d, m (fp16), qs[16]; nibbles as in Q4_0; value d*q + m.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h);
}
vec4 block_scales(uint ib, uint sb) {
    vec2 dm = field_half2(FIELD_OFF_dm, ib);
    return vec4(dm, dm);
}
