// Q8_0: d (fp16), qs[32] int8; value d*q.
#define QUANTS_SIGNED
uvec4 block_quants(uint ib, uint sb, uint h) {
    return w128[FIELD_OFF_qs / 4u + 2u * ib + h];
}
struct BlockMeta { float d; };
BlockMeta block_meta(uint ib) { return BlockMeta(field_half(FIELD_OFF_d, ib)); }
vec4 meta_scales(BlockMeta m, uint sb) { return vec4(m.d, 0.0, m.d, 0.0); }
#include "generic_scales.glsl"
