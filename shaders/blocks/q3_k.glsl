// Q3_K: hmask as bits1 planes, qs as bits2 planes, scales unpacked to 16
// int8 (scale - 32), d (fp16). q = low 2 bits | high bit << 2 (0..7);
// value d*(scale-32)*(q-4).
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    uint sub = ib * 8u + sb;
    return bits2(FIELD_OFF_qs, sub, h) | (bits1(FIELD_OFF_hmask, sub, h) << 2);
}
vec4 block_scales(uint ib, uint sb) {
    int w = int(byte_pair(FIELD_OFF_scales, ib, sb));
    float d = field_half(FIELD_OFF_d, ib);
    float s0 = d * float(bitfieldExtract(w, 0, 8)), s1 = d * float(bitfieldExtract(w, 8, 8));
    return vec4(s0, -4.0 * s0, s1, -4.0 * s1);
}
