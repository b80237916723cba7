// TQ1_0: qs[48], qh[4]: ternary digits ("trits", t in 0..2), 5 a byte in qs and
// 4 in qh, as ggml stores them; d (fp16); value d*(t-1). A byte b holds
// trit n as ((b * 3^n) mod 256) * 3 >> 8 (ggml's dequantize_row_tq1_0).
// Elements 32n..32n+31 (n < 5) are trit n of qs[0..31]; 160 + 16n + i
// (n < 5) trit n of qs[32 + i]; 240 + 4n + j trit n of qh[j]. So sub-block
// sb < 5 is trit sb of qs words 0..7; sb 5..7 take qs words 8..11 twice
// (trits 2(sb-5) and 2(sb-5) + 1), but sb 7's second half is qh's trits 0..3.
#ifndef BLOCKS_TQ1_0_GLSL
#define BLOCKS_TQ1_0_GLSL
#define QUANTS_SIGNED
#include "../common.glsl"
#include "bitplanes.glsl"
#include "d_signed.glsl"
// Trit n of each byte of v, n per component given as p = 3^n (p <= 81: a
// byte times p fits the 16 bits its lane of the two below has).
uvec4 trits(uvec4 v, uvec4 p) {
    uvec4 even = ((v & 0x00FF00FFu) * p) & 0x00FF00FFu;  // bytes 0 and 2
    uvec4 odd = (((v >> 8) & 0x00FF00FFu) * p) & 0x00FF00FFu;  // bytes 1 and 3
    return (((even * 3u) >> 8) & 0x00030003u) | ((odd * 3u) & 0x03000300u);
}
// 3^n, n in 0..4 (selects: a constant array indexed at run time is copied at every use).
uint pow3(uint n) { return n < 2u ? (n == 0u ? 1u : 3u) : (n == 2u ? 9u : (n == 3u ? 27u : 81u)); }
// Sub-block sb from qs words 0..7 (a, b), qs words 8..11 (c) and qh.
Quants tq1_quants(uvec4 a, uvec4 b, uvec4 c, uint qh, uint sb) {
    bool low = sb < 5u;
    uint n = low ? sb : 2u * (sb - 5u);
    uvec4 p = uvec4(pow3(n));
    uvec4 hi = sb == 7u ? trits(uvec4(qh), uvec4(1u, 3u, 9u, 27u)) : trits(low ? b : c, low ? p : 3u * p);
    return less_one(Quants(trits(low ? a : c, p), hi));
}
const uint QS_VEC4 = 3u;  // 48 bytes of qs a block
Quants block_quants(uint ib, uint sb) {
    uint q = FIELD_OFF_qs / 4u + ib * QS_VEC4;
    // sb < 5: vectors 0 and 1; else vector 2 (as c)
    uvec4 a = load_w128(q + (sb < 5u ? 0u : 2u)), b = load_w128(q + 1u);
    return tq1_quants(a, b, a, load_w32(FIELD_OFF_qh + ib), sb);
}
// A whole superblock per thread: d, its 48 qs and 4 qh bytes in five loads
// (d as a float, not unit_d's vec4: 7% faster on lavapipe, where these 17
// words a row for 16 rows crowd the registers).
struct UnitMeta { float d; uvec4 a, b, c; uint qh; };
UnitMeta unit_meta(uint ib) {
    uint q = FIELD_OFF_qs / 4u + ib * QS_VEC4;
    return UnitMeta(field_half(FIELD_OFF_d, ib), load_w128(q), load_w128(q + 1u), load_w128(q + 2u),
                    load_w32(FIELD_OFF_qh + ib));
}
vec4 meta_scales(UnitMeta m, uint sb) { return d_alone(m.d); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) { return tq1_quants(m.a, m.b, m.c, m.qh, sb); }
#endif
