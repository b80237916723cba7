// NVFP4: scales: a UE4M3 byte per 16 elements; qs: e2m1 nibbles in Q4_0's
// order per 32-element sub-block (vkq/blocks/repack.py), 2 sub-blocks a block. The
// quant is the doubled e2m1 value (the table E2M1_PAIRS, as MXFP4's) and the
// scale ggml's ggml_ue4m3_to_fp32, which halves it.
#ifndef BLOCKS_NVFP4_GLSL
#define BLOCKS_NVFP4_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "nibble_pairs.glsl"
Quants block_quants(uint ib, uint sb) { return nibble_values(FIELD_OFF_qs, ib * 2u + sb); }
// Byte x as ggml decodes it: exponent bits 3..6, mantissa 0..2, bit 7 unread;
// (8+m)*2^(e-8) halved, or m*2^-9 halved for e = 0 (exact in fp32); 0x7F is 0.
float ue4m3_half(uint x) {
    uint e = (x >> 3) & 0xFu, m = x & 7u;
    float v = float(e == 0u ? m : m + 8u) * uintBitsToFloat((max(e, 1u) + 116u) << 23);  // * 2^(max(e,1)-11)
    return (x & 0xFFu) == 0x7Fu ? 0.0 : v;
}
// Sub-block sb's two scales: bytes 2sb and 2sb+1 of the block's scale word.
vec4 nvfp4_scales(uint word, uint sb) {
    uint w = word >> (16u * sb);
    return vec4(ue4m3_half(w & 0xFFu), 0.0, ue4m3_half((w >> 8) & 0xFFu), 0.0);
}
vec4 block_scales(uint ib, uint sb) { return nvfp4_scales(load_w32(FIELD_OFF_scales + ib), sb); }
// A unit (8 sub-blocks) is four blocks: their scale words in one 16-byte load.
struct UnitMeta { uvec4 scales; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(load_w128(FIELD_OFF_scales / 4u + ib0 / 4u)); }
vec4 meta_scales(UnitMeta m, uint j) { return nvfp4_scales(m.scales[j >> 1], j & 1u); }
#endif
