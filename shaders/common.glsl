// Shared by every vkq compute shader: how the weights buffer is read and the
// packed int8 dot product.
//
// Weights live on the device as one array per block field (see vkq/blocks/formats.py
// and vkq/blocks/layout.py): field F of block `ib` starts at word FIELD_OFF_F +
// ib * FIELD_WORDS_F. Every field array is 16-byte aligned, so 16-byte fields
// are read with one uvec4 load. Kompute enables no 8/16-bit storage features,
// so nothing here reads bytes or halves from memory directly. Decoders read
// the weights only through load_w32/load_w64/load_w128.

#ifndef COMMON_GLSL
#define COMMON_GLSL
#ifdef TEXEL_WEIGHTS
// The weights read through three uniform texel buffer views of the same
// buffer (1, 2 and 4 words per texel; vkq/ops.py binds them). On lavapipe a
// texel fetch is a branch-free gather, where a storage-buffer load at an
// offset that varies across lanes is a loop over the lanes with a bounds
// check per component: mat-vec is 20-40% faster this way there. The tables
// choose it per device (weights_binding). The including shader defines
// W_TEXEL_BINDING, the first of the three bindings (its others come first).
layout(binding = W_TEXEL_BINDING) uniform usamplerBuffer w_u32;
layout(binding = W_TEXEL_BINDING + 1) uniform usamplerBuffer w_u32x2;
layout(binding = W_TEXEL_BINDING + 2) uniform usamplerBuffer w_u32x4;
uint load_w32(uint i) { return texelFetch(w_u32, int(i)).x; }
uvec2 load_w64(uint i) { return texelFetch(w_u32x2, int(i)).xy; }
uvec4 load_w128(uint i) { return texelFetch(w_u32x4, int(i)); }
#else
layout(std430, binding = 0) readonly restrict buffer WeightWords { uint w32[]; };
layout(std430, binding = 0) readonly restrict buffer WeightVec2 { uvec2 w64[]; };
layout(std430, binding = 0) readonly restrict buffer WeightVec4 { uvec4 w128[]; };
uint load_w32(uint i) { return w32[i]; }
uvec2 load_w64(uint i) { return w64[i]; }
uvec4 load_w128(uint i) { return w128[i]; }
#endif

// The quants of one 32-element sub-block: two 16-element halves, 4 per word.
struct Quants { uvec4 lo, hi; };

// A block's 32 or 64 bytes of one field held in registers (a decoder's
// UnitMeta), read with 16-byte loads and picked from by selects: an array
// indexed by a loop counter is put in memory by lavapipe's compiler when the
// loop is not unrolled (2-4x slower i-quant mat-vecs).
struct Words8 { uvec4 a, b; };
struct Words16 { uvec4 a, b, c, d; };
// Block ib's bytes of the field at word offset off (16-byte aligned).
Words8 load_words8(uint off, uint ib) {
    uint i = off / 4u + 2u * ib;
    return Words8(load_w128(i), load_w128(i + 1u));
}
Words16 load_words16(uint off, uint ib) {
    uint i = off / 4u + 4u * ib;
    return Words16(load_w128(i), load_w128(i + 1u), load_w128(i + 2u), load_w128(i + 3u));
}
// Word i (0..7).
uint word_of(Words8 w, uint i) { return (i < 4u ? w.a : w.b)[i & 3u]; }
// Word pair i (0..7): words 2i and 2i + 1.
uvec2 word_pair_of(Words16 w, uint i) {
    uvec4 v = i < 4u ? (i < 2u ? w.a : w.b) : (i < 6u ? w.c : w.d);
    return (i & 1u) == 0u ? v.xy : v.zw;
}

// Field offsets (in 32-bit words) come as push constants so that one pipeline
// serves every matrix of a type; FIELD_OFF_<name> is defined per type by
// tools/compile_shaders.py from the format table.
layout(push_constant) uniform Params {
    uint nrows;         // rows of the matrix in this buffer (per expert)
    uint nblocks;       // blocks per row
    uint field0;        // word offsets of the block fields, in table order
    uint field1;
    uint field2;
    uint field3;
    uint x_col_stride;  // between columns of x: floats (DMMV) or Q8_1 blocks (MMVQ)
    uint x_slot_stride; // MUL_MAT_ID: between the inputs of used-expert slots (0: shared x)
    uint y_col_stride;  // floats between columns of y
    uint y_slot_stride; // MUL_MAT_ID: floats between used-expert slots of y
    uint y_row_offset;  // first row of this buffer in y (big matrices are split)
} p;

// fp16 pair field (e.g. d and m): one word per block.
vec2 field_half2(uint off, uint ib) { return unpackHalf2x16(load_w32(off + ib)); }
// fp16 field: two blocks share a word.
float field_half(uint off, uint ib) {
    return unpackHalf2x16(load_w32(off + (ib >> 1)) >> ((ib & 1u) * 16u)).x;
}
// byte field: four blocks share a word.
uint field_byte(uint off, uint ib) {
    return bitfieldExtract(load_w32(off + (ib >> 2)), int((ib & 3u) * 8u), 8);
}

// Signed packed 4x8-bit dot product. With the device feature
// shaderIntegerDotProduct enabled this is OpSDot from SPV_KHR_integer_dot_product
// (glslang 12 does not know GL_EXT_integer_dot_product, so the instruction is
// declared through GL_EXT_spirv_intrinsics: 4450 = OpSDot, capabilities 6019
// DotProduct and 6018 DotProductInput4x8BitPacked, literal 0 = 4x8 packed).
#ifdef INT_DOT
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int op_sdot(int a, int b, spirv_literal int packed_format);
int dot4x8(uint a, uint b) { return op_sdot(int(a), int(b), 0); }
#else
// The same arithmetic in int32 for devices without the extension.
int dot4x8(uint a, uint b) {
    ivec4 va = ivec4(bitfieldExtract(int(a), 0, 8), bitfieldExtract(int(a), 8, 8),
                     bitfieldExtract(int(a), 16, 8), bitfieldExtract(int(a), 24, 8));
    ivec4 vb = ivec4(bitfieldExtract(int(b), 0, 8), bitfieldExtract(int(b), 8, 8),
                     bitfieldExtract(int(b), 16, 8), bitfieldExtract(int(b), 24, 8));
    return va.x * vb.x + va.y * vb.y + va.z * vb.z + va.w * vb.w;
}
#endif

int dot16x8(uvec4 a, uvec4 b) {
    return dot4x8(a.x, b.x) + dot4x8(a.y, b.y) + dot4x8(a.z, b.z) + dot4x8(a.w, b.w);
}

// Four packed bytes to floats, unsigned or signed.
vec4 unpack_u8x4(uint v) { return vec4(uvec4(v, v >> 8, v >> 16, v >> 24) & 0xFFu); }
vec4 unpack_i8x4(uint v) {
    return vec4(bitfieldExtract(int(v), 0, 8), bitfieldExtract(int(v), 8, 8),
                bitfieldExtract(int(v), 16, 8), bitfieldExtract(int(v), 24, 8));
}
#endif
