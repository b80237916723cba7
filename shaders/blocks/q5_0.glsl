// Q5_0: d (fp16), qh (fifth bits, as a bits1 plane), qs[16]; value d*(q-16).
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h) | (bits1(FIELD_OFF_qh, ib, h) << 4);
}
struct BlockMeta { float d; };
BlockMeta block_meta(uint ib) { return BlockMeta(field_half(FIELD_OFF_d, ib)); }
vec4 meta_scales(BlockMeta m, uint sb) { return vec4(m.d, -16.0 * m.d, m.d, -16.0 * m.d); }
#include "generic_scales.glsl"
