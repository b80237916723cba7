// F32: plain values, 32 to a device block (rows padded with zeros).
#ifndef BLOCKS_F32_GLSL
#define BLOCKS_F32_GLSL
#define BLOCK_PLAIN
#include "../common.glsl"
void block_values(uint ib, uint h, out vec4 v[4]) {
    uint base = FIELD_OFF_v / 4u + 8u * ib + 4u * h;
    v[0] = uintBitsToFloat(load_w128(base));
    v[1] = uintBitsToFloat(load_w128(base + 1u));
    v[2] = uintBitsToFloat(load_w128(base + 2u));
    v[3] = uintBitsToFloat(load_w128(base + 3u));
}
struct UnitMeta { float unused; };  // plain values have no scales
UnitMeta unit_meta(uint ib0) { return UnitMeta(0.0); }
#endif
