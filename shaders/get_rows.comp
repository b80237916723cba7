#version 450
// Rows of a quantized matrix as floats, picked by index: out[v] = W[ids[v]]
// for vector v (the token embedding lookup), times SCALE (specialization
// constant 2, float32 bits; 1 by default). W is one buffer of a matrix in
// vkq's device layout (vkq/blocks/layout.py), the layout the mat-vec reads, decoded
// by the same block decoders (dequant.glsl); a matrix split over several
// buffers is one dispatch per buffer, each writing only the rows it holds.
// One invocation per 32-element chunk of a row; workgroup row y is vector v.
//
// Variants (defines, set by tools/compile_shaders.py): TYPE_<name>, QK and
// the field offsets, as for mul_mat_vec.comp. Bindings: 0 W, 1 ids, 2 out.
// Push constants: common.glsl's Params, of which this shader reads nrows
// (rows in this buffer), nblocks, field0..3, x_col_stride (floats between
// the output vectors, a multiple of 4) and y_row_offset (the buffer's first
// row in the matrix).

#extension GL_GOOGLE_include_directive : require

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

#include "common.glsl"
// How 4-bit quants that index 16 values are decoded: the device's choice for
// the matrix's mat-vec (blocks/nibble_pairs.glsl; vkq.dispatch.config.VALUE_LOOKUPS).
layout(constant_id = 1) const bool VALUES_BY_SELECTS = false;
// The rows' scale, as float32 bits (Gemma's sqrt(n_embd)): 1.0 leaves them as decoded.
layout(constant_id = 2) const uint SCALE_BITS = 0x3F800000u;
#include "dequant.glsl"

layout(std430, binding = 1) readonly restrict buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly restrict buffer Out { vec4 out4[]; };

const uint CHUNKS_PER_BLOCK = QK / 32u;

void main() {
    const uint c = gl_GlobalInvocationID.x;
    const uint v = gl_WorkGroupID.y;
    if (c >= p.nblocks * CHUNKS_PER_BLOCK) {
        return;
    }
    // The host range-checks the ids; a row of another buffer is not ours.
    const int row = ids[v] - int(p.y_row_offset);
    if (row < 0 || row >= int(p.nrows)) {
        return;
    }
    const uint ib = uint(row) * p.nblocks + c / CHUNKS_PER_BLOCK;
    const uint sb = c % CHUNKS_PER_BLOCK;
    const uint o4 = (v * p.x_col_stride + c * 32u) / 4u;
    vec4 values[8];
    dequant_chunk(ib, sb, values);
    for (uint i = 0u; i < 8u; i++) {
        out4[o4 + i] = SCALE_BITS == 0x3F800000u ? values[i] : values[i] * uintBitsToFloat(SCALE_BITS);
    }
}
