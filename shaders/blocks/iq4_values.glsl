// IQ4's 16 int8 values (IQ4_VALUES, generated from the gguf package) for
// bytes that each hold a nibble: four selects pick the table word, a shift
// the byte (no dynamically indexed array: those spill on some compilers).
uint iq4_byte(uint n) {
    uint w = (n & 8u) != 0u ? ((n & 4u) != 0u ? IQ4_VALUES[3] : IQ4_VALUES[2])
                            : ((n & 4u) != 0u ? IQ4_VALUES[1] : IQ4_VALUES[0]);
    return (w >> (8u * (n & 3u))) & 0xFFu;
}
uint iq4_word(uint n) {
    return iq4_byte(n & 0xFu) | (iq4_byte((n >> 8) & 0xFu) << 8) | (iq4_byte((n >> 16) & 0xFu) << 16)
         | (iq4_byte(n >> 24) << 24);
}
uvec4 iq4_words(uvec4 n) { return uvec4(iq4_word(n.x), iq4_word(n.y), iq4_word(n.z), iq4_word(n.w)); }
Quants iq4_quants(Quants n) { return Quants(iq4_words(n.lo), iq4_words(n.hi)); }
