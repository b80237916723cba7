// Q4_0: d (fp16), qs[16]; element j is the low nibble of qs[j], j+16 the high one.
#include "bitplanes.glsl"
uvec4 block_quants(uint ib, uint sb, uint h) {
    return nibbles(FIELD_OFF_qs, ib, h);
}
#define D_ZERO_POINT -8.0
#include "d_scales.glsl"
