// Q8_1 blocks of 32 fp32 values, for the int8 mat-vec path: written by
// quantize_q8_1.comp, and by the ops whose output a mat-vec reads next
// (rms_norm, swiglu, attention), which then save a dispatch and a barrier.
// As ggml's reference quantizer: d = amax/127, q = round-half-away(x/d),
// plus s0/s1 = the sum of q over each 16-element half, which lets the int8
// path apply block minimums and offsets without unpacking. d and s are kept
// in fp32 (ggml keeps them in fp16, and s = d * sum): s in units of d keeps
// the sum of 16 values near float32's limit in range (the mat-vec applies d
// last).
//
// X_PLANES = 2 adds a second plane (vkq's "q8_1x2" activations): the rounding
// residual r = x - d*q quantized the same way (d_r = amax(r)/127), so the
// int8 path sees d*q + d_r*q_r, about 14 bits per value instead of 8, for
// twice the integer dot products. s0/s1 then cover both planes (sum of q plus
// d_r/d times the sum of q_r).
// Block b is XQ_BLOCK = 2*X_PLANES+1 uvec4: the 32 quants of each plane, then
// (d, s0, s1, d_r) as float bits (d_r = 0 with one plane).
//
// A block whose d would be a float32 subnormal (amax below 127 * 2^-126,
// about 1.5e-36) is flushed to zero: d = 0 and quants 0. 1/d of a subnormal
// d overflows to inf, and 0 * inf would put NaN in every quant and residual;
// a GPU that flushes subnormals (Vulkan allows it) would make d zero anyway.
// The error is at most 1.5e-36 per value, where ggml (d in fp16) flushes
// every block with amax below ~7.6e-6.
//
// A block holding NaN or inf gets d = s0 = s1 = d_r = NaN (its quants are
// then meaningless): every dot product with it is NaN, so a non-finite x
// gives NaN in each output of its column, as float64 numpy gives NaN or
// +-inf there, and is never rounded into plausible integers.
//
// The including shader declares the spec constant X_PLANES (1 or 2) and a
// buffer `uvec4 xq[]`, then calls store_q8_1.

#ifndef Q8_1_GLSL
#define Q8_1_GLSL
const uint XQ_BLOCK = 2u * X_PLANES + 1u;  // uvec4 per block

uint pack_i8x4(ivec4 q) {
    return uint(q.x & 0xFF) | (uint(q.y & 0xFF) << 8) | (uint(q.z & 0xFF) << 16) | (uint(q.w & 0xFF) << 24);
}

// One int8 plane of a 32-value block: scale d = amax/127, q = round half away
// from zero of v/d, packed 4 to a word. Returns d and the sum of q per
// 16-element half; leaves in v the fp32 residual v - d*q (no fused
// multiply-add: numpy's model rounds the product and the difference).
float quantize_plane(inout vec4 v[8], out uint packed[8], out ivec2 qsum) {
    float amax = 0.0;
    for (uint i = 0u; i < 8u; i++) {
        const vec4 a = abs(v[i]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    const float d0 = amax / 127.0;
    // (an exponent test, not d0 >= 2^-126: a compiler may flush d0 first)
    const float d = (floatBitsToUint(d0) & 0x7F800000u) != 0u ? d0 : 0.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    qsum = ivec2(0);
    for (uint i = 0u; i < 8u; i++) {
        const vec4 s = v[i] * id;
        const ivec4 q = ivec4(sign(s) * floor(abs(s) + 0.5));
        packed[i] = pack_i8x4(q);
        qsum[i / 4u] += q.x + q.y + q.z + q.w;
        precise vec4 r = v[i] - d * vec4(q);
        v[i] = r;
    }
    return d;
}

// The 32 values v as Q8_1 block `block` of xq (in blocks, not uvec4s).
void store_q8_1(vec4 v[8], uint block) {
    // (not isnan/isinf: compilers may fold those away without exact float semantics)
    bool finite = true;
    for (uint i = 0u; i < 8u; i++) {
        finite = finite && all(lessThanEqual(floatBitsToUint(v[i]) & 0x7F800000u, uvec4(0x7F000000u)));
    }
    const uint o = XQ_BLOCK * block;
    uint packed[8];
    ivec2 qsum;
    const float d = quantize_plane(v, packed, qsum);
    xq[o] = uvec4(packed[0], packed[1], packed[2], packed[3]);
    xq[o + 1u] = uvec4(packed[4], packed[5], packed[6], packed[7]);
    vec2 hsum = vec2(qsum);  // sum of the values the int8 path sees, per 16-element half, over d
    float dr = 0.0;
    if (X_PLANES == 2u) {
        dr = quantize_plane(v, packed, qsum);  // the residual's plane
        xq[o + 2u] = uvec4(packed[0], packed[1], packed[2], packed[3]);
        xq[o + 3u] = uvec4(packed[4], packed[5], packed[6], packed[7]);
        hsum += (d != 0.0 ? dr / d : 0.0) * vec2(qsum);
    }
    const uint NAN_BITS = 0x7FC00000u;
    xq[o + XQ_BLOCK - 1u] = finite ? uvec4(floatBitsToUint(d), floatBitsToUint(hsum.x), floatBitsToUint(hsum.y),
                                           floatBitsToUint(dr))
                                   : uvec4(NAN_BITS);
}
#endif
