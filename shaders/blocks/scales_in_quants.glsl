// For types whose scales share words with their quants (IQ2_XXS, IQ3_XXS):
// a unit keeps only its first block's index, and each chunk's scale is read
// with its quants (the same words: one load for both).
struct UnitMeta { uint ib0; };
UnitMeta unit_meta(uint ib0) { return UnitMeta(ib0); }
vec4 meta_scales(UnitMeta m, uint j) { return block_scales(m.ib0 + j / (QK / 32u), j % (QK / 32u)); }
