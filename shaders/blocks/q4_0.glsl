// Q4_0: d (fp16), qs[16]; element j is the low nibble of qs[j], j+16 the high one.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h);
}
struct BlockMeta { float d; };
BlockMeta block_meta(uint ib) { return BlockMeta(field_half(FIELD_OFF_d, ib)); }
vec4 meta_scales(BlockMeta m, uint sb) { return vec4(m.d, -8.0 * m.d, m.d, -8.0 * m.d); }
#include "generic_scales.glsl"
