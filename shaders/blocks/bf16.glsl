// BF16: plain bfloat16 values (the high half of an fp32), 32 to a device
// block (rows padded with zeros).
#define BLOCK_PLAIN
vec2 unpack_bf16x2(uint u) { return uintBitsToFloat(uvec2(u << 16, u & 0xFFFF0000u)); }
void block_values(uint ib, uint h, out vec4 v[4]) {
    uint base = FIELD_OFF_v / 4u + 4u * ib + 2u * h;
    for (uint i = 0u; i < 2u; i++) {
        uvec4 u = load_w128(base + i);
        v[2u * i] = vec4(unpack_bf16x2(u.x), unpack_bf16x2(u.y));
        v[2u * i + 1u] = vec4(unpack_bf16x2(u.z), unpack_bf16x2(u.w));
    }
}
struct UnitMeta { float unused; };  // plain values have no scales
UnitMeta unit_meta(uint ib0) { return UnitMeta(0.0); }
