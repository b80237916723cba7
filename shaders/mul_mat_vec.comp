#version 450
// Quantized matrix times vector(s): y[:, c] = W @ x[:, c] for NCOLS columns.
//
// Variants (defines, set by tools/compile_shaders.py):
//   TYPE_<name>      block type, decoded by shaders/blocks/<name>.glsl
//   MMVQ             int8 path: x arrives as Q8_1 blocks (quantize_q8_1.comp)
//                    and is dotted with the packed int8 quants; otherwise the
//                    quants are dequantized to float and dotted with fp32 x
//   INT_DOT          MMVQ with OpSDot (else the same arithmetic in int32)
//   REDUCE_SUBGROUP  reduce partial sums with subgroupAdd (else shared memory)
//   MUL_MAT_ID       W is a stack of experts; workgroup row y is a used-expert
//                    slot and ids[slot] picks its expert
//   TEXEL_WEIGHTS    W is read through uniform texel buffer views (common.glsl)
//   TEXEL_X          x (or its Q8_1 blocks) is read through a uniform texel
//                    buffer view of 16-byte texels, not as a storage buffer
//
// GLU (specialization constant 8): W is a stacked gate|up matrix (the gate
// rows, then as many up rows; MUL_MAT_ID: each expert's) and
// y = silu(W_gate x) * (W_up x), ggml's
// SwiGLU, fused into the mat-vec: a workgroup's NUM_ROWS rows (an even
// number) are NUM_ROWS/2 gate rows and the up rows of the same index, so it
// holds both halves of each output; y[i] is the bits that a SwiGLU over the
// unfused mat-vec's output would give (the same float operations on the same
// values). nrows counts W's rows; y has half as many.
//
// ACCUMULATE (specialization constant 9): y += W x, the output added into
// what y holds (a llama layer's residual stream: the residual add folded
// into the mat-vec that produces it, so the norm after it reads one vector,
// not two). y[i] = y[i] + (W x)[i]: the bits of the unfused mat-vec's output
// added to y afterwards (float addition commutes). Each output is read and
// written by the one invocation that owns it, so in place is safe. Not with
// MUL_MAT_ID (its slots are not one vector) nor GLU (the host refuses both:
// silu(g) * u + y could be contracted into one fma, other bits).
//
// Bindings: 0 W, 1 x, 2 y, then 3 ids (MUL_MAT_ID), then the three texel
// views of W (TEXEL_WEIGHTS; binding 0 is then not read).
//
// Work split: a workgroup computes NUM_ROWS consecutive rows. Its threads
// stride over the 32-element sub-blocks ("chunks") of the row; each thread
// keeps NUM_ROWS x NCOLS partial sums, so every x value it loads serves all
// of its rows. The partial sums are then reduced across the workgroup.
// Parameters are specialization constants so one SPIR-V serves every tuning.

#extension GL_GOOGLE_include_directive : require
#ifdef REDUCE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint NUM_ROWS = 1;
layout(constant_id = 2) const uint NCOLS = 1;
layout(constant_id = 3) const uint CHUNKS_PER_THREAD = 1;  // 32-element chunks a thread takes at a time
// true: a workgroup's threads split each row's K and reduce (GPUs);
// false: each thread owns NUM_ROWS rows over the whole K, no reduction, and
// every thread reads the same x at the same time (CPU drivers: lavapipe
// loads a value shared by all lanes once instead of once per lane).
layout(constant_id = 4) const bool SPLIT_K = true;
// MMVQ: int8 planes per activation block (1: Q8_1 as ggml; 2: plus the
// rounding residual, see quantize_q8_1.comp).
layout(constant_id = 5) const uint X_PLANES = 1;
// true: 4-bit quants that index 16 values pick them by selects, not table
// loads (blocks/nibble_pairs.glsl; vkq/dispatch/config.py VALUE_LOOKUPS).
layout(constant_id = 6) const bool VALUES_BY_SELECTS = false;
// MUL_MAT_ID: consecutive used-expert slots that read one vector of x (a
// token's experts, when a chunk of tokens shares the call); x_slot_stride
// is then the stride between those vectors.
layout(constant_id = 7) const uint SLOTS_PER_X = 1;
layout(constant_id = 8) const bool GLU = false;
layout(constant_id = 9) const bool ACCUMULATE = false;

#ifdef MUL_MAT_ID
#define W_TEXEL_BINDING 4
#else
#define W_TEXEL_BINDING 3
#endif

#include "common.glsl"
#include "blocks.glsl"
#include "silu.glsl"

#ifdef MMVQ
#ifdef BLOCK_PLAIN
#error "plain types have no int8 path"
#endif
// Q8_1 activation: block b is 2*X_PLANES+1 uvec4: 32 int8 quants per plane,
// then (d, s0, s1, d_r) as float bits, s0/s1 = the sum of each 16-element
// half of the values the planes encode, divided by d (q8_1.glsl).
const uint XQ_BLOCK = 2u * X_PLANES + 1u;
#endif
// x: fp32 values (DMMV) or Q8_1 blocks (MMVQ), read 16 bytes at a time.
#if defined(TEXEL_X)
layout(binding = 1) uniform usamplerBuffer x_u32x4;
uvec4 load_x(uint i) { return texelFetch(x_u32x4, int(i)); }
#else
layout(std430, binding = 1) readonly restrict buffer X { uvec4 x_words[]; };
uvec4 load_x(uint i) { return x_words[i]; }
#endif

layout(std430, binding = 2) writeonly buffer Y { float y[]; };
// (y's values before the dispatch, read with ACCUMULATE: the same buffer)
layout(std430, binding = 2) readonly buffer YIn { float y_in[]; };
#ifdef MUL_MAT_ID
layout(std430, binding = 3) readonly restrict buffer Ids { int ids[]; };
#endif

const uint WG_SIZE = gl_WorkGroupSize.x;
const uint CHUNKS_PER_BLOCK = QK / 32u;
const uint UNIT_CHUNKS = 8u;  // chunks covered by one unit_meta
// A thread taking 8 chunks at a time (a k-quant superblock, or 8 small
// blocks) loads their scales at once (unit_meta: one 16-byte load where
// per chunk it would be 8 word loads), not per chunk (block_scales).
const bool WHOLE_UNITS = CHUNKS_PER_THREAD == UNIT_CHUNKS;
// The dequantize path's order within a chunk (see main).
const bool HOLD_ROWS = SPLIT_K && NCOLS >= NUM_ROWS;

#ifndef BLOCK_PLAIN
// The quants of chunk j of a unit, sub-block sb of block ib: from the unit's
// meta where the decoder loads them with it (META_QUANTS: a few wide loads
// instead of a narrow one per chunk), else from the weights.
Quants chunk_quants(UnitMeta m, uint j, uint ib, uint sb) {
#ifdef META_QUANTS
    if (WHOLE_UNITS) {
        return meta_quants(m, j);
    }
#endif
    return block_quants(ib, sb);
}
#endif

#if !defined(MMVQ) && !defined(BLOCK_PLAIN)
// The dequantize path sums quants times x (16 of them per half-block)
// before it applies the block's scale: up to 2^12 times the largest |x|,
// past float32's range once |x| nears 1e35, where the products with the
// scaled weights still fit. A half-block of x whose squares do not all fit
// float32 (a value of 2^64, about 1.8e19, or more) is summed as x * 2^-12
// and its sums scaled back: exact (powers of two). Others are summed as they
// are, so subnormal x keeps every bit float32 gives it, as in the mat-mat
// (mul_mm.comp), which multiplies dequantized weights by x. (The sum of
// squares is the cheapest test of size: one fma per value. The int8 path
// multiplies by x's scale d last; plain types have no quants: neither
// scales x.)
#define SCALE_LARGE_X
const float X_SCALE = 1.0 / 4096.0;
#endif

// 16 values of x (one half of a 32-value chunk), what a row's half-block
// dots with: v scaled by 1 or X_SCALE, sum their sum (the blocks' offsets
// multiply it), inv what undoes the scale.
struct XHalf { vec4 v[4]; float sum; float inv; };

XHalf x_half(uint k4) {
    // (Written without loops: lavapipe counts loop iterations against a
    // budget, vkq.dispatch.choose.loop_iterations.)
    precise vec4 v0 = uintBitsToFloat(load_x(k4)), v1 = uintBitsToFloat(load_x(k4 + 1u)),
                 v2 = uintBitsToFloat(load_x(k4 + 2u)), v3 = uintBitsToFloat(load_x(k4 + 3u));
    float inv = 1.0;
#ifdef SCALE_LARGE_X
    const vec4 sq = v0 * v0 + v1 * v1 + v2 * v2 + v3 * v3;
    const bool large = !(sq.x + sq.y + sq.z + sq.w <= 3.4028234663852886e38);  // (inf or NaN: scaled)
    const float s = large ? X_SCALE : 1.0;
    inv = large ? 1.0 / X_SCALE : 1.0;
    v0 *= s;
    v1 *= s;
    v2 *= s;
    v3 *= s;
#endif
    return XHalf(vec4[4](v0, v1, v2, v3), dot(v0 + v1 + v2 + v3, vec4(1.0)), inv);
}

// One row's half-block of weights as it is dotted with x: 16 values (plain
// types), or 16 quants as floats and the half's (scale, offset).
struct WHalf { vec4 q[4]; vec2 so; };

#ifndef BLOCK_PLAIN
WHalf w_half(Quants q, vec4 so, uint h) {
    const uvec4 qh = h == 0u ? q.lo : q.hi;
#ifdef QUANTS_SIGNED
    return WHalf(vec4[4](unpack_i8x4(qh.x), unpack_i8x4(qh.y), unpack_i8x4(qh.z), unpack_i8x4(qh.w)),
                 h == 0u ? so.xy : so.zw);
#else
    return WHalf(vec4[4](unpack_u8x4(qh.x), unpack_u8x4(qh.y), unpack_u8x4(qh.z), unpack_u8x4(qh.w)),
                 h == 0u ? so.xy : so.zw);
#endif
}
#endif

// What a half-block adds to a row's sum for one column of x.
float half_dot(WHalf w, XHalf x) {
    const float qx = dot(w.q[0], x.v[0]) + dot(w.q[1], x.v[1]) + dot(w.q[2], x.v[2]) + dot(w.q[3], x.v[3]);
#ifdef BLOCK_PLAIN
    return qx;
#else
    // sum_i (scale*q_i + offset) * x_i
    return w.so.x * qx + w.so.y * x.sum;
#endif
}

// A row's sum with a half-block added: its sums scaled back by an fma
// (x.inv is 1 or 2^12, so the product is exact: the bits of acc + t).
float add_half(float acc, WHalf w, XHalf x) {
#ifdef BLOCK_PLAIN
    return acc + half_dot(w, x);
#else
    return fma(half_dot(w, x), x.inv, acc);
#endif
}

shared float partial[NUM_ROWS * NCOLS][WG_SIZE];

// The rows of the output (y's rows: W's, or with GLU half of them) and the
// first of this thread's (or workgroup's) NUM_ROWS rows (with GLU its
// NUM_ROWS / 2 outputs' first).
uint out_rows() { return GLU ? p.nrows / 2u : p.nrows; }
uint out_per_group() { return GLU ? NUM_ROWS / 2u : NUM_ROWS; }

// W's row for the thread's r-th row (rows past the end repeat the last one;
// their sums are not written). With GLU, rows r < NUM_ROWS/2 are gate rows
// out0 + r, the rest the up rows of the same outputs.
uint w_row(uint out0, uint r) {
    if (!GLU) {
        return min(out0 + r, p.nrows - 1u);
    }
    const uint half_rows = p.nrows / 2u;
    const uint i = r % out_per_group();
    return min(out0 + i, half_rows - 1u) + (r < out_per_group() ? 0u : half_rows);
}

// Output o (< out_per_group()) of column col from the finished sums in acc:
// the row's, or with GLU silu(gate) * up, each unscaled as y would hold it.
#define OUT_VALUE(o, col) (GLU ? silu(acc[(o) * NCOLS + (col)]) * acc[((o) + out_per_group()) * NCOLS + (col)] \
                               : acc[(o) * NCOLS + (col)])

// Output o of column col into y at index i: written, or with ACCUMULATE
// added to what y holds there.
void put_out(uint i, float value) {
    y[i] = ACCUMULATE ? y_in[i] + value : value;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    // Row groups beyond 65535 workgroups continue in z.
    const uint group = gl_WorkGroupID.z * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    const uint row0 = (SPLIT_K ? group : group * WG_SIZE + tid) * out_per_group();  // the first output row
    if (row0 >= out_rows()) {
        // With SPLIT_K uniform across the workgroup, so no barrier is skipped
        // by part of it; without it no barrier follows.
        return;
    }
    const uint slot = gl_WorkGroupID.y;
#ifdef MUL_MAT_ID
    const uint expert = uint(ids[slot]);  // range-checked on the host
    const uint block0 = expert * p.nrows * p.nblocks;
#else
    const uint block0 = 0u;
#endif
    const uint x0 = (slot / SLOTS_PER_X) * p.x_slot_stride;

    float acc[NUM_ROWS * NCOLS];
    for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
        acc[i] = 0.0;
    }

    // Each thread takes CHUNKS_PER_THREAD consecutive chunks at a time. With
    // a whole k-quant superblock per thread (8 chunks) the sub-block index is
    // a constant in the unrolled loop, so the compiler resolves the per-type
    // branches and loads the block's scales once, not once per sub-block.
    const uint nchunks = p.nblocks * CHUNKS_PER_BLOCK;
    // CHUNKS_PER_THREAD divides the chunks of a row (the dispatcher checks).
    const uint nunits = nchunks / CHUNKS_PER_THREAD;
    for (uint unit = SPLIT_K ? tid : 0u; unit < nunits; unit += SPLIT_K ? WG_SIZE : 1u) {
    UnitMeta meta[NUM_ROWS];
    if (WHOLE_UNITS) {
        const uint ib0 = unit * UNIT_CHUNKS / CHUNKS_PER_BLOCK;
        for (uint r = 0u; r < NUM_ROWS; r++) {
            meta[r] = unit_meta(block0 + w_row(row0, r) * p.nblocks + ib0);
        }
    }
    for (uint j = 0u; j < CHUNKS_PER_THREAD; j++) {
        const uint c = unit * CHUNKS_PER_THREAD + j;
        const uint ib_in_row = c / CHUNKS_PER_BLOCK;
        const uint sb = c % CHUNKS_PER_BLOCK;
#ifdef MMVQ
        // One Q8_1 block per column: quants and (d, s0, s1, d_r).
        uvec4 xq_lo[NCOLS], xq_hi[NCOLS], xr_lo[NCOLS], xr_hi[NCOLS];
        vec4 xds[NCOLS];
        for (uint col = 0u; col < NCOLS; col++) {
            const uint b = XQ_BLOCK * (x0 + col * p.x_col_stride + c);
            xq_lo[col] = load_x(b);
            xq_hi[col] = load_x(b + 1u);
            xr_lo[col] = X_PLANES == 2u ? load_x(b + 2u) : uvec4(0u);
            xr_hi[col] = X_PLANES == 2u ? load_x(b + 3u) : uvec4(0u);
            xds[col] = uintBitsToFloat(load_x(b + XQ_BLOCK - 1u));
        }
        for (uint r = 0u; r < NUM_ROWS; r++) {
            // Rows past the end repeat the last row; their sums are not written.
            const uint ib = block0 + w_row(row0, r) * p.nblocks + ib_in_row;
            const Quants q = chunk_quants(meta[r], j, ib, sb);
            const vec4 so = WHOLE_UNITS ? meta_scales(meta[r], j) : block_scales(ib, sb);
            for (uint col = 0u; col < NCOLS; col++) {
                // sum_i (scale*q_i + offset) * d*qx_i = d * (scale*dot(q, qx) + offset*s), s in
                // units of d; d last, so that nothing before it grows with x.
                float v = xds[col].x * (so.x * float(dot16x8(q.lo, xq_lo[col])) + so.z * float(dot16x8(q.hi, xq_hi[col]))
                                        + so.y * xds[col].y + so.w * xds[col].z);
                if (X_PLANES == 2u) {
                    v += xds[col].w * (so.x * float(dot16x8(q.lo, xr_lo[col])) + so.z * float(dot16x8(q.hi, xr_hi[col])));
                }
                acc[r * NCOLS + col] += v;
            }
        }
#else
        // Which values a thread holds while it dots a chunk's rows with its
        // columns: x of every column (32 values each), each row then decoded
        // and used at once; or, where threads split K (GPUs) and there are
        // no fewer columns than rows, each row's decoded half-block (16
        // values), then the columns one at a time (the GPUs' 2 rows at 8
        // columns: 32 values of x per column held at once spilled registers
        // there). A thread owning whole rows (CPU drivers) keeps the first:
        // lavapipe ran the second 2x slower at 8 columns. The same
        // operations on each row and column either way.
        if (!HOLD_ROWS) {
            XHalf xh[NCOLS][2];
            for (uint col = 0u; col < NCOLS; col++) {
                const uint k4 = (x0 + col * p.x_col_stride + c * 32u) / 4u;
                xh[col][0] = x_half(k4);
                xh[col][1] = x_half(k4 + 4u);
            }
            for (uint r = 0u; r < NUM_ROWS; r++) {
                const uint ib = block0 + w_row(row0, r) * p.nblocks + ib_in_row;
#ifndef BLOCK_PLAIN
                // (scale, offset) of both halves; the quants loaded once for both.
                const vec4 so = WHOLE_UNITS ? meta_scales(meta[r], j) : block_scales(ib, sb);
                const Quants q = chunk_quants(meta[r], j, ib, sb);
#endif
                for (uint h = 0u; h < 2u; h++) {
#ifdef BLOCK_PLAIN
                    WHalf w;
                    block_values(ib, h, w.q);
#else
                    const WHalf w = w_half(q, so, h);
#endif
                    for (uint col = 0u; col < NCOLS; col++) {
                        acc[r * NCOLS + col] = add_half(acc[r * NCOLS + col], w, xh[col][h]);
                    }
                }
            }
        } else {
#ifndef BLOCK_PLAIN
            vec4 so[NUM_ROWS];
            Quants q[NUM_ROWS];
            for (uint r = 0u; r < NUM_ROWS; r++) {
                const uint ib = block0 + w_row(row0, r) * p.nblocks + ib_in_row;
                so[r] = WHOLE_UNITS ? meta_scales(meta[r], j) : block_scales(ib, sb);
                q[r] = chunk_quants(meta[r], j, ib, sb);
            }
#endif
            for (uint h = 0u; h < 2u; h++) {
                WHalf w[NUM_ROWS];
                for (uint r = 0u; r < NUM_ROWS; r++) {
#ifdef BLOCK_PLAIN
                    block_values(block0 + w_row(row0, r) * p.nblocks + ib_in_row, h, w[r].q);
#else
                    w[r] = w_half(q[r], so[r], h);
#endif
                }
                for (uint col = 0u; col < NCOLS; col++) {
                    const XHalf xh = x_half((x0 + col * p.x_col_stride + c * 32u) / 4u + 4u * h);
                    for (uint r = 0u; r < NUM_ROWS; r++) {
                        acc[r * NCOLS + col] = add_half(acc[r * NCOLS + col], w[r], xh);
                    }
                }
            }
        }
#endif
    }
    }

    const uint y0 = slot * p.y_slot_stride + p.y_row_offset;
    if (!SPLIT_K) {
        // This thread's rows are complete.
        for (uint i = 0u; i < out_per_group() * NCOLS; i++) {
            const uint o = i / NCOLS, col = i % NCOLS;
            if (row0 + o < out_rows()) {
                put_out(y0 + col * p.y_col_stride + row0 + o, OUT_VALUE(o, col));
            }
        }
        return;
    }

    // Reduce the partial sums of the workgroup's threads.
#ifdef REDUCE_SUBGROUP
    // Correct for any subgroup size: each subgroup adds its lanes, then the
    // subgroups' totals are added through shared memory.
    for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
        acc[i] = subgroupAdd(acc[i]);
    }
    if (gl_NumSubgroups > 1u) {
        if (subgroupElect()) {
            for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
                partial[i][gl_SubgroupID] = acc[i];
            }
        }
        barrier();
        // (The subgroups outside, the sums inside: a loop of constant count
        // inside one of a count known only at run time is unrolled, so acc is
        // indexed by constants; the other way NAK put acc in local memory.)
        for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
            acc[i] = 0.0;
        }
        for (uint s = 0u; s < gl_NumSubgroups; s++) {
            for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
                acc[i] += partial[i][s];
            }
        }
    }
#else
    // Tree reduction; WG_SIZE is a power of two (checked by the dispatcher).
    for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
        partial[i][tid] = acc[i];
    }
    barrier();
    for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
                partial[i][tid] += partial[i][tid + s];
            }
        }
        barrier();
    }
    for (uint i = 0u; i < NUM_ROWS * NCOLS; i++) {
        acc[i] = partial[i][0];
    }
#endif

    // Every thread now holds the totals; thread i % WG_SIZE writes output i.
    // (A loop over every output, so that acc is indexed by constants once it
    // is unrolled: indexed by tid, NAK put acc in local memory.)
    for (uint i = 0u; i < out_per_group() * NCOLS; i++) {
        const uint o = i / NCOLS, col = i % NCOLS;
        if (i % WG_SIZE == tid && row0 + o < out_rows()) {
            put_out(y0 + col * p.y_col_stride + row0 + o, OUT_VALUE(o, col));
        }
    }
}
