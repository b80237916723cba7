// A block type with one sub-block per block: its scales are its block meta.
vec4 block_scales(uint ib, uint sb) { return meta_scales(block_meta(ib), sb); }
