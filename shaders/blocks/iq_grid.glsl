// Signed values from an i-quant grid, which vkq stores at word 0 of the
// weights buffer (vkq/blocks/layout.py). Grid values are positive bytes below 128,
// so a byte is negated as (v ^ 0xFF) + 1 without a borrow into the next.

#ifndef BLOCKS_IQ_GRID_GLSL
#define BLOCKS_IQ_GRID_GLSL
#include "../common.glsl"
// The 4 bytes of w, byte i negated where bit i of s is set. The product
// places bit i of s at bit 8i (its four shifted copies do not overlap).
uint with_signs(uint w, uint s) {
    uint ones = ((s & 0xFu) * 0x00204081u) & 0x01010101u;
    return (w ^ (ones * 0xFFu)) + ones;
}
// ggml's sign bytes (its ksigns table) of four 7-bit indices, one per byte
// of b: bit 7 set where the index has an odd number of ones (so the number
// of minus signs is even). The parity is folded to bit 0 of each byte.
uint ksign_bytes(uint b) {
    uint x = (b ^ (b >> 4)) & 0x0F0F0F0Fu;
    x ^= x >> 2;
    x ^= x >> 1;
    return b | ((x & 0x01010101u) << 7);
}
// The same for four indices packed 7 bits apart from bit 0 (IQ2_XXS, IQ3_XXS).
uint ksigns4(uint packed) {
    return ksign_bytes((packed & 0x7Fu) | ((packed << 1) & 0x7F00u) | ((packed << 2) & 0x7F0000u)
                       | ((packed << 3) & 0x7F000000u));
}

#ifdef GRID_PAIRS
// 8 values per entry (IQ2): one 8-byte load (on lavapipe one gather where two
// word loads were two: 1.2x), signed by the 8 low bits of s.
uvec2 grid_signed(uint idx, uint s) {
    uvec2 g = load_w64(idx);
    return uvec2(with_signs(g.x, s), with_signs(g.y, s >> 4));
}
#else
// 4 values per entry (IQ3): one word, signed by the 4 low bits of s.
uint grid_signed(uint idx, uint s) { return with_signs(load_w32(idx), s); }
#endif
#endif
