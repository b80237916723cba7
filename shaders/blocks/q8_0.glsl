// Q8_0: d (fp16), qs[32] int8; value d*q.
#define QUANTS_SIGNED
uvec4 block_quants(uint ib, uint sb, uint h) {
    return w128[FIELD_OFF_qs / 4u + 2u * ib + h];
}
vec4 block_scales(uint ib, uint sb) {
    float d = field_half(FIELD_OFF_d, ib);
    return vec4(d, 0.0, d, 0.0);
}
