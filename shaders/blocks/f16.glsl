// F16: plain fp16 values, 32 to a device block (rows padded with zeros).
#ifndef BLOCKS_F16_GLSL
#define BLOCKS_F16_GLSL
#define BLOCK_PLAIN
#include "../common.glsl"
void block_values(uint ib, uint h, out vec4 v[4]) {
    uint base = FIELD_OFF_v / 4u + 4u * ib + 2u * h;
    uvec4 a = load_w128(base), b = load_w128(base + 1u);
    v[0] = vec4(unpackHalf2x16(a.x), unpackHalf2x16(a.y));
    v[1] = vec4(unpackHalf2x16(a.z), unpackHalf2x16(a.w));
    v[2] = vec4(unpackHalf2x16(b.x), unpackHalf2x16(b.y));
    v[3] = vec4(unpackHalf2x16(b.z), unpackHalf2x16(b.w));
}
struct UnitMeta { float unused; };  // plain values have no scales
UnitMeta unit_meta(uint ib0) { return UnitMeta(0.0); }
#endif
