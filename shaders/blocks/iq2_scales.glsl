// IQ2_XS / IQ2_S scales: d (fp16) and a byte per sub-block, a 4-bit ls per
// 16 elements (low nibble first); value d*(0.5+ls)/4*grid*sign.
#ifndef BLOCKS_IQ2_SCALES_GLSL
#define BLOCKS_IQ2_SCALES_GLSL
#include "../common.glsl"
vec4 iq2_scales(float d, uint byte) {
    vec2 s = d * (0.5 + vec2(float(byte & 0xFu), float((byte >> 4) & 0xFu))) * 0.25;
    return vec4(s.x, 0.0, s.y, 0.0);
}
// Byte sb of the 8 scale bytes sc.
uint iq2_scale_byte(uvec2 sc, uint sb) { return sc[sb >> 2] >> (8u * (sb & 3u)); }
// The 8 scale bytes of block ib (IQ2_SCALES_AT: their 64-bit word's index).
vec4 block_scales(uint ib, uint sb) {
    return iq2_scales(field_half(FIELD_OFF_d, ib), iq2_scale_byte(load_w64(IQ2_SCALES_AT(ib)), sb));
}
#endif
