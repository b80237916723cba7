// IQ1_S / IQ1_M quants: a grid entry holds 8 values g in {-1, 0, 1} (the
// nibbles g+1 of one word; the grid sits at word 0 of the weights buffer,
// vkq/layout.py) and a group of 8 adds delta = +-1/8. The integer quant is
// 8*(g + delta) = 8g +- 1, and the scale carries the /8.
// Nibbles 0..3 of n as bytes 0..3.
uint nibbles_to_bytes(uint n) { return (n & 0xFu) | ((n & 0xF0u) << 4) | ((n & 0xF00u) << 8) | ((n & 0xF000u) << 12); }
// The 8 quants 8g +- 1 of entry idx as two words of int8: 8(g+1) plus a bias
// of 128 - 7 (delta +1/8) or 128 - 9 (delta -1/8) stays within a byte (no
// carries), and flipping bit 7 removes the 128.
uvec2 iq1_entry(uint idx, bool delta_negative) {
    uint g = load_w32(idx);
    uint bias = delta_negative ? 0x77777777u : 0x79797979u;
    return uvec2(((nibbles_to_bytes(g & 0xFFFFu) << 3) + bias) ^ 0x80808080u,
                 ((nibbles_to_bytes(g >> 16) << 3) + bias) ^ 0x80808080u);
}
// A 32-element sub-block's four entries: the low 8 bits of their indices in
// the bytes of qs, the high 3 in `high` every `high_step` bits, and bit e of
// `negative` the sign of entry e's delta.
Quants iq1_quants(uint qs, uint high, uint high_step, uint negative) {
    uvec2 g[4];
    for (uint e = 0u; e < 4u; e++) {
        g[e] = iq1_entry(((qs >> (8u * e)) & 0xFFu) | (((high >> (high_step * e)) & 7u) << 8), ((negative >> e) & 1u) != 0u);
    }
    return Quants(uvec4(g[0], g[1]), uvec4(g[2], g[3]));
}
