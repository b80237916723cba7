// TQ2_0: qs (laid out as Q2_K's: vkq/blocks/repack.py puts them in sub-block order)
// and d (fp16) per 256 elements; value d*(q-1). On the device it is Q2_0
// with 256-element blocks.
#ifndef BLOCKS_TQ2_0_GLSL
#define BLOCKS_TQ2_0_GLSL
#include "q2_0.glsl"
#endif
