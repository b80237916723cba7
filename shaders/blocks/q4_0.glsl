// Q4_0: d (fp16), qs[16]; element j is the low nibble of qs[j], j+16 the high one.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h);
}
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, -8.0 * d, d, -8.0 * d);
}
