// Q6_K: low 4 bits as nibbles and high 2 bits as bits2 planes per sub-block,
// scales[16] int8 (one per 16 elements), d (fp16); value d*sc*(q-32).
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    uint sub = ib * 8u + sb;
    return nibbles(FIELD_OFF_ql, sub, h) | (bits2(FIELD_OFF_qh, sub, h) << 4);
}
vec4 block_scales(uint ib, uint sb) {
    int w = int(byte_pair(FIELD_OFF_scales, ib, sb));
    float d = field_half(FIELD_OFF_d, ib);
    float s0 = d * float(bitfieldExtract(w, 0, 8)), s1 = d * float(bitfieldExtract(w, 8, 8));
    return vec4(s0, -32.0 * s0, s1, -32.0 * s1);
}
