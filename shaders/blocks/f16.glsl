// F16: plain fp16 values, 32 to a device block (rows padded with zeros).
#define BLOCK_PLAIN
void block_values(uint ib, uint h, out vec4 v[4]) {
    uint base = FIELD_OFF_v / 4u + 4u * ib + 2u * h;
    for (uint i = 0u; i < 2u; i++) {
        uvec4 u = load_w128(base + i);
        v[2u * i] = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
        v[2u * i + 1u] = vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
    }
}
struct UnitMeta { float unused; };  // plain values have no scales
UnitMeta unit_meta(uint ib0) { return UnitMeta(0.0); }
