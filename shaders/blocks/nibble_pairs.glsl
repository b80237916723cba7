// 4-bit quants that index 16 int8 values (IQ4_NL, IQ4_XS, MXFP4, NVFP4). The table
// at word 0 of the weights buffer (vkq/blocks/layout.py, vkq/blocks/lookup_tables.py) holds
// 256 pair words, word b = value(b & 15) in bits 0..7 and value(b >> 4) in
// bits 16..23, then the 16 values as 4 words of bytes. GPUs decode a byte (two
// quants) per table load; with VALUES_BY_SELECTS (CPU drivers, where a load at
// varying offsets is a gather) the values are picked by selects instead.
// VALUES_BY_SELECTS is a specialization constant of the including shader
// (which numbers its constants).
#ifndef BLOCKS_NIBBLE_PAIRS_GLSL
#define BLOCKS_NIBBLE_PAIRS_GLSL
#include "../common.glsl"
#include "bitplanes.glsl"
const uint VALUE_WORDS = 256u;

uint pair_at(uint q, uint k) { return load_w32((q >> (8u * k)) & 0xFFu); }
// A word of 4 bytes in Q4_0's layout -> (values of its low nibbles, of its high nibbles).
uvec2 pair_values(uint q) {
    uint t01 = pair_at(q, 0u) | (pair_at(q, 1u) << 8);  // low 0, low 1, high 0, high 1
    uint t23 = pair_at(q, 2u) | (pair_at(q, 3u) << 8);
    return uvec2((t01 & 0xFFFFu) | (t23 << 16), (t01 >> 16) | (t23 & 0xFFFF0000u));
}

// Value n of v (16 bytes): two selects pick the word, a shift the byte.
uint selected_value(uvec4 v, uint n) {
    uint w = (n & 8u) != 0u ? ((n & 4u) != 0u ? v.w : v.z) : ((n & 4u) != 0u ? v.y : v.x);
    return (w >> (8u * (n & 3u))) & 0xFFu;
}
// A word of 4 bytes that each hold one quant -> their 4 values.
uint selected_values(uvec4 v, uint n) {
    return selected_value(v, n & 0xFu) | (selected_value(v, (n >> 8) & 0xFu) << 8)
         | (selected_value(v, (n >> 16) & 0xFu) << 16) | (selected_value(v, n >> 24) << 24);
}

// A 32-element sub-block of the nibble plane written by vkq/blocks/repack.py (as
// bitplanes.glsl's nibbles() reads it), as signed values.
Quants nibble_values(uint off, uint sub) {
    uvec4 q = load_w128(off / 4u + sub);
    if (VALUES_BY_SELECTS) {
        uvec4 v = load_w128(VALUE_WORDS / 4u);  // the same address in every lane: one load
        Quants n = nibbles_of(q);
        return Quants(uvec4(selected_values(v, n.lo.x), selected_values(v, n.lo.y), selected_values(v, n.lo.z),
                            selected_values(v, n.lo.w)),
                      uvec4(selected_values(v, n.hi.x), selected_values(v, n.hi.y), selected_values(v, n.hi.z),
                            selected_values(v, n.hi.w)));
    }
    uvec2 a = pair_values(q.x), b = pair_values(q.y), c = pair_values(q.z), d = pair_values(q.w);
    return Quants(uvec4(a.x, b.x, c.x, d.x), uvec4(a.y, b.y, c.y, d.y));
}
#endif
