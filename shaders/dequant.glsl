// One 32-element chunk of a weights row as floats: sub-block sb of block ib,
// decoded by the type's block decoder (blocks.glsl), v[0..3] its first
// 16-element half, v[4..7] its second. For every shader that turns weights
// into floats before it uses them (get_rows.comp, mul_mm.comp), so that they
// hold the same values.
#ifndef DEQUANT_GLSL
#define DEQUANT_GLSL
#include "common.glsl"
#include "blocks.glsl"

#ifndef BLOCK_PLAIN
// value = scale * q + offset, per 16-element half (blocks/README.md).
void dequant_values(Quants q, vec4 so, out vec4 v[8]) {
    for (uint h = 0u; h < 2u; h++) {
        const uvec4 qh = h == 0u ? q.lo : q.hi;
        const vec2 sh = h == 0u ? so.xy : so.zw;
        for (uint i = 0u; i < 4u; i++) {
#ifdef QUANTS_SIGNED
            const vec4 qv = unpack_i8x4(qh[i]);
#else
            const vec4 qv = unpack_u8x4(qh[i]);
#endif
            v[4u * h + i] = sh.x * qv + sh.y;
        }
    }
}

// The same for chunk j (sub-block sb of block ib) of a unit of 8 chunks
// whose UnitMeta m the caller loaded (unit_meta: the unit's scales, and with
// META_QUANTS its quants, in a few wide loads instead of a narrow one per
// chunk; with j a constant the decoder's per-sub-block choices resolve at
// compile time).
void dequant_unit_chunk(UnitMeta m, uint j, uint ib, uint sb, out vec4 v[8]) {
#ifdef META_QUANTS
    dequant_values(meta_quants(m, j), meta_scales(m, j), v);
#else
    dequant_values(block_quants(ib, sb), meta_scales(m, j), v);
#endif
}
#endif

void dequant_chunk(uint ib, uint sb, out vec4 v[8]) {
#ifdef BLOCK_PLAIN
    vec4 lo[4], hi[4];
    block_values(ib, 0u, lo);
    block_values(ib, 1u, hi);
    v[0] = lo[0]; v[1] = lo[1]; v[2] = lo[2]; v[3] = lo[3];
    v[4] = hi[0]; v[5] = hi[1]; v[6] = hi[2]; v[7] = hi[3];
#else
    dequant_values(block_quants(ib, sb), block_scales(ib, sb), v);
#endif
}
#endif
