// Q5_0: d (fp16), qh (fifth bits, as a bits1 plane), qs[16]; value d*(q-16).
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h) | (bits1(FIELD_OFF_qh, ib, h) << 4);
}
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, -16.0 * d, d, -16.0 * d);
}
