// Readers of the sub-block bit planes written by vkq/blocks/repack.py. `sub` is the
// global sub-block index (block * sub-blocks per block + sub-block). Each
// loads the sub-block's bits once (one load per plane: on CPU drivers every
// load instruction costs a loop over the lanes) and returns both 16-element
// halves, 4 quants per word, in order.
#ifndef BLOCKS_BITPLANES_GLSL
#define BLOCKS_BITPLANES_GLSL
#include "../common.glsl"
// A sub-block's 16 bytes of nibbles: element j is the low nibble of byte j, j+16 the high one.
Quants nibbles_of(uvec4 q) { return Quants(q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu); }
Quants nibbles(uint off, uint sub) { return nibbles_of(load_w128(off / 4u + sub)); }
uvec4 bits2_half(uint q) { return uvec4(q, q >> 2, q >> 4, q >> 6) & 0x03030303u; }
Quants bits2_of(uvec2 q) { return Quants(bits2_half(q.x), bits2_half(q.y)); }
Quants bits2(uint off, uint sub) {  // 8 bytes per sub-block: a word per half
    return bits2_of(load_w64(off / 2u + sub));
}
Quants bits1_of(uint q) {
    uvec4 s = uvec4(q, q >> 1, q >> 2, q >> 3);  // bit 4h+w of byte k: element 16h+4w+k
    return Quants(s & 0x01010101u, (s >> 4) & 0x01010101u);
}
Quants bits1(uint off, uint sub) {  // 4 bytes per sub-block: a nibble per element group
    return bits1_of(load_w32(off + sub));
}
// Quants 0..128 less one, as signed bytes: q + 0x7F stays within its byte, and
// flipping bit 7 takes the 0x80 off (the types of d_signed.glsl).
Quants less_one(Quants q) {
    return Quants((q.lo + 0x7F7F7F7Fu) ^ 0x80808080u, (q.hi + 0x7F7F7F7Fu) ^ 0x80808080u);
}
// a | b << shift, half by half (a quant's high bits from a second plane).
Quants with_high_bits(Quants a, Quants b, uint shift) {
    return Quants(a.lo | (b.lo << shift), a.hi | (b.hi << shift));
}
// The two bytes 2sb and 2sb+1 of a 16-byte-per-block byte field, in bits 0..15.
uint byte_pair(uint off, uint ib, uint sb) {
    return load_w32(off + 4u * ib + (sb >> 1)) >> (16u * (sb & 1u));
}
// Bytes 2sb and 2sb+1 of `word` (which holds bytes 2sb & ~3 ..) as signed int8.
vec2 int8_pair_of(uint word, uint sb) {
    int w = int(word >> (16u * (sb & 1u)));
    return vec2(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8));
}
// The same, read from a 16-byte-per-block byte field (Q3_K and Q6_K scales).
vec2 int8_pair(uint off, uint ib, uint sb) {
    return int8_pair_of(load_w32(off + 4u * ib + (sb >> 1)), sb);
}
// fp16 number j (0..7) of 8 packed in a uvec4.
float half_of(uvec4 v, uint j) {
    return unpackHalf2x16(v[j >> 1] >> (16u * (j & 1u))).x;
}
#endif
