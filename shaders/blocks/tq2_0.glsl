// TQ2_0: qs as Q2_K's, bits2 planes per 32-element sub-block; d (fp16);
// value d*(q-1), q-1 in -1..2 (signed bytes: an inf d gives +-inf as in ggml).
#define QUANTS_SIGNED
#include "bitplanes.glsl"
Quants block_quants(uint ib, uint sb) { return less_one(bits2(FIELD_OFF_qs, ib * 8u + sb)); }
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, 0.0, d, 0.0);
}
// A whole superblock per thread: d and its 64 bytes of quants in five loads.
struct UnitMeta { float d; Words16 qs; };
UnitMeta unit_meta(uint ib) { return UnitMeta(field_half(FIELD_OFF_d, ib), load_words16(FIELD_OFF_qs, ib)); }
vec4 meta_scales(UnitMeta m, uint sb) { return vec4(m.d, 0.0, m.d, 0.0); }
#define META_QUANTS
Quants meta_quants(UnitMeta m, uint sb) { return less_one(bits2_of(word_pair_of(m.qs, sb))); }
