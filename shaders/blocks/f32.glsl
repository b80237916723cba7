// F32: plain values, 32 to a device block (rows padded with zeros).
#define BLOCK_PLAIN
void block_values(uint ib, uint h, out vec4 v[4]) {
    uint base = FIELD_OFF_v / 4u + 8u * ib + 4u * h;
    for (uint i = 0u; i < 4u; i++) v[i] = uintBitsToFloat(load_w128(base + i));
}
struct UnitMeta { float unused; };  // plain values have no scales
UnitMeta unit_meta(uint ib0) { return UnitMeta(0.0); }
