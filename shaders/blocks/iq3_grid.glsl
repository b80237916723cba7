// IQ3_S / IQ3_XXS quants, one reader for both: a 32-element sub-block is
// eight grid entries of 4 values (one word each, iq_grid.glsl). Entry e's
// index is byte e of q with bit e of qh as its ninth bit (IQ3_S; IQ3_XXS's
// indices are bytes: it passes qh = 0, which the compiler folds away), and
// its signs are nibble e of `signs` (IQ3_S stores them as bits, IQ3_XXS as
// ksign indices, ksigns4).
#ifndef BLOCKS_IQ3_GRID_GLSL
#define BLOCKS_IQ3_GRID_GLSL
#include "../common.glsl"
#include "iq_grid.glsl"
uint iq3_entry(uvec2 q, uint qh, uint signs, uint e) {
    return grid_signed(((q[e >> 2] >> (8u * (e & 3u))) & 0xFFu) | (((qh >> e) & 1u) << 8), signs >> (4u * e));
}
Quants iq3_quants(uvec2 q, uint qh, uint signs) {
    return Quants(uvec4(iq3_entry(q, qh, signs, 0u), iq3_entry(q, qh, signs, 1u), iq3_entry(q, qh, signs, 2u),
                        iq3_entry(q, qh, signs, 3u)),
                  uvec4(iq3_entry(q, qh, signs, 4u), iq3_entry(q, qh, signs, 5u), iq3_entry(q, qh, signs, 6u),
                        iq3_entry(q, qh, signs, 7u)));
}
#endif
