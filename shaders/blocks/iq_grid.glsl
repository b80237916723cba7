// Signed values from an i-quant grid, which vkq stores at word 0 of the
// weights buffer (vkq/layout.py). Grid values are positive bytes below 128,
// so a byte is negated as (v ^ 0xFF) + 1 without a borrow into the next.

// Bits 0..3 of s as 0xFF masks of bytes 0..3.
uint sign_mask(uint s) { return ((s & 1u) | ((s & 2u) << 7) | ((s & 4u) << 14) | ((s & 8u) << 21)) * 0xFFu; }
// The 4 bytes of w, byte i negated where bit i of s is set.
uint with_signs(uint w, uint s) {
    uint m = sign_mask(s);
    return (w ^ m) + (m & 0x01010101u);
}
// ggml's sign byte of a 7-bit index (its ksigns table): bit 7 makes the number of minus signs even.
uint ksign(uint i) { return i | ((uint(bitCount(i)) & 1u) << 7); }

#ifdef GRID_PAIRS
// 8 values per entry (IQ2): two words, signed by the 8 low bits of s.
uvec2 grid_signed(uint idx, uint s) {
    return uvec2(with_signs(load_w32(2u * idx), s), with_signs(load_w32(2u * idx + 1u), s >> 4));
}
#else
// 4 values per entry (IQ3): one word, signed by the 4 low bits of s.
uint grid_signed(uint idx, uint s) { return with_signs(load_w32(idx), s); }
#endif
