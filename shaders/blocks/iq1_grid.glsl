// IQ1_S / IQ1_M quants: a grid entry holds 8 values g in {-1, 0, 1} (the
// nibbles g+1 of one word in Q4_0's order, vkq/blocks/lookup_tables.py; the grid
// sits at word 0 of the weights buffer, vkq/blocks/layout.py) and a group of 8 adds
// delta = +-1/8. The integer quant is 8*(g + delta) = 8g +- 1, and the scale
// carries the /8.
// The 8 quants 8g +- 1 of entry idx as two words of int8: 8(g+1) plus a bias
// of 128 - 7 (delta +1/8) or 128 - 9 (delta -1/8) stays within a byte (no
// carries), and flipping bit 7 removes the 128.
#ifndef BLOCKS_IQ1_GRID_GLSL
#define BLOCKS_IQ1_GRID_GLSL
#include "../common.glsl"
uvec2 iq1_entry(uint idx, bool delta_negative) {
    uint g = load_w32(idx);
    uint bias = delta_negative ? 0x77777777u : 0x79797979u;
    return ((uvec2(g << 3, g >> 1) & 0x78787878u) + bias) ^ 0x80808080u;
}
// Entry e (0..3) of a 32-element sub-block: the low 8 bits of its index in
// byte e of qs, the high 3 in `high` at bit high_step*e, and bit e of
// `negative` the sign of its delta.
uvec2 iq1_entry_of(uint qs, uint high, uint high_step, uint negative, uint e) {
    return iq1_entry(((qs >> (8u * e)) & 0xFFu) | (((high >> (high_step * e)) & 7u) << 8), ((negative >> e) & 1u) != 0u);
}
// The sub-block's four entries.
Quants iq1_quants(uint qs, uint high, uint high_step, uint negative) {
    return Quants(uvec4(iq1_entry_of(qs, high, high_step, negative, 0u), iq1_entry_of(qs, high, high_step, negative, 1u)),
                  uvec4(iq1_entry_of(qs, high, high_step, negative, 2u), iq1_entry_of(qs, high, high_step, negative, 3u)));
}
#endif
