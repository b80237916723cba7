// BF16: plain bfloat16 values (the high half of an fp32), 32 to a device
// block (rows padded with zeros).
#ifndef BLOCKS_BF16_GLSL
#define BLOCKS_BF16_GLSL
#define BLOCK_PLAIN
#include "../common.glsl"
vec2 unpack_bf16x2(uint u) { return uintBitsToFloat(uvec2(u << 16, u & 0xFFFF0000u)); }
void block_values(uint ib, uint h, out vec4 v[4]) {
    uint base = FIELD_OFF_v / 4u + 4u * ib + 2u * h;
    uvec4 a = load_w128(base), b = load_w128(base + 1u);
    v[0] = vec4(unpack_bf16x2(a.x), unpack_bf16x2(a.y));
    v[1] = vec4(unpack_bf16x2(a.z), unpack_bf16x2(a.w));
    v[2] = vec4(unpack_bf16x2(b.x), unpack_bf16x2(b.y));
    v[3] = vec4(unpack_bf16x2(b.z), unpack_bf16x2(b.w));
}
struct UnitMeta { float unused; };  // plain values have no scales
UnitMeta unit_meta(uint ib0) { return UnitMeta(0.0); }
#endif
