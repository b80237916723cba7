#version 450
// Matrix times matrix, tiled: y[:, c] = W @ x[:, c] for every column of x
// (many: a prompt's tokens), the weights dequantized to float (the float
// flavour). The columns are as many as x's binding holds (its length over
// x_col_stride: a vkq.Tensor holds exactly its vectors), so that one
// pipeline serves every column count.
//
// Variants (defines, set by tools/compile_shaders.py):
//   TYPE_<name>      block type, decoded by shaders/blocks/<name>.glsl
//   TEXEL_WEIGHTS    W is read through uniform texel buffer views (common.glsl)
//   TEXEL_X          x is read through a uniform texel buffer view of 16-byte
//                    texels, not as a storage buffer
//   MMQ              the int8 flavour: x arrives as Q8_1 blocks
//                    (quantize_q8_1.comp, q8_1.glsl) and each chunk's quants
//                    are dotted with them as the int8 mat-vec does (the same
//                    arithmetic per chunk, chunk_dot)
//   INT_DOT          MMQ with OpSDot (else the same arithmetic in int32)
//   MUL_MAT_ID       W is a stack of experts, a column per used-expert slot
//                    of ggml's MUL_MAT_ID over many tokens, the slots
//                    grouped by expert in binding 3 (see "Experts" below)
//   COOPMAT          on cooperative matrices (VK_KHR_cooperative_matrix),
//                    fragments of the device's own shape (CM_M x CM_N x
//                    CM_K, spec constants): the float flavour with the tiles
//                    in shared memory as float16, f16 x f16 -> f32; with MMQ
//                    the int8 flavour, s8 x s8 -> s32 (see "Cooperative
//                    matrices" below); storage buffers. Needs glslang 13
//                    (tools/compile_shaders.py) and a device that enabled the
//                    extension's feature
//
// Bindings: 0 W, 1 x, 2 y, then 3 the expert groups (MUL_MAT_ID), then the
// three texel views of W (TEXEL_WEIGHTS; binding 0 is then not read).
// Push constants: common.glsl's Params, of which
// this shader reads nrows (rows in this buffer), nblocks, field0..3,
// x_col_stride and y_col_stride (floats between columns of x and of y, each a
// multiple of 4; with MMQ x's in Q8_1 blocks) and y_row_offset (the
// buffer's first row in y).
//
// Work split: workgroup (x + z * 65535, y) computes the tile of BM rows and
// BN columns at (x * BM, y * BN), walking K in steps of BK_CHUNKS 32-element
// chunks; each invocation computes TM rows by TN columns of the tile and
// keeps their TM x TN sums in registers, so that every value it loads serves
// TN (or TM) products. Each weight is dequantized once per BN columns (the
// mat-vec does it once per 8). Invocation (tr, tc) = (id % (BM / TM),
// id / (BM / TM)) takes rows tr + i * (BM / TM) and columns tc * TN + j:
// neighbouring invocations take neighbouring rows and the same columns.
// Rows, columns and K need not be multiples of the tile: rows past the end
// repeat the last row, columns past the end read zeros (or repeat the last
// column), a step past the end of K dequantizes nothing; none of these is
// written to y. A column's bits depend on the tile configuration, not on
// the number of columns nor on the other columns.
//
// Experts (MUL_MAT_ID): the columns are used-expert slots. Slot s reads
// expert ids[s] and x vector s / SLOTS_PER_X (a token's slots share its
// vector, or each slot has its own) and writes y's vector s. A dispatch of
// group_by_expert.comp before this one sorted the slots by expert (binding
// 3: N_EXPERT counts, then the slots, each expert's in slot order).
// Workgroup y is the y-th tile of columns of that order: the tiles of
// expert 0's slots (BN each, the last one partial), then expert 1's, and so
// on; its invocations walk the counts to find their expert and its slots
// (the same loads in all of them), then run the tiles over those as over
// columns of x, each weight of the expert dequantized once per BN of its
// slots. The host dispatches as many tiles as the slots could need, the
// workgroups past the last tile end after the walk. A slot's bits depend
// on its x, its expert and the tiles only: its sums are those of a column
// of the plain kernel, wherever it falls in a tile.
//
// Two ways of feeding the invocations (SHARED_TILES):
// - true (GPUs): per step the workgroup decodes the BM x BK weights into
//   shared memory (each invocation whole chunks, with the type's decoder)
//   and copies the BN x BK values of x beside them; after a barrier each
//   invocation multiplies its rows by its columns from there. The float
//   flavour dequantizes the chunks and takes four K values at a time; the
//   int8 flavour keeps each chunk's int8 quants and scales (block_quants,
//   block_scales: what the registers way takes) and copies x's Q8_1 blocks,
//   then dots a chunk at a time as the registers way does, in the same
//   order, so that both ways give the same bits.
// - false (CPU drivers): no shared memory; each invocation dequantizes the
//   chunks of its own TM rows into registers and reads x straight from
//   memory, at addresses that are the same for all invocations of a column
//   group. lavapipe reads shared memory at an address that varies across
//   its lanes one lane at a time (the first way ran 6x slower than the
//   mat-vec there), while a texel fetch is one gather. With BK_CHUNKS 8 the
//   step is a unit of 8 chunks, whose scales the decoder loads at once
//   (unit_meta, as the mat-vec's 8 chunks per thread: the k-quants' per-
//   sub-block choices then resolve at compile time); K must then be whole
//   units (the host checks).
//
// Cooperative matrices (COOPMAT; SHARED_TILES only). TM and TN are then a
// subgroup's block: BM / TM x BN / TN subgroups (the host makes the
// workgroup that many times the subgroup size, SG), each holding TM / CM_M x
// TN / CM_N accumulator fragments, CM_M x CM_N x CM_K the fragment shape the
// device lists (vkq.device.caps). Subgroups past BM / TM x BN / TN (a device
// whose subgroups are smaller than the host assumed) compute nothing; larger
// ones would leave blocks out: the self-check finds either (wrong numbers).
// - The float flavour: the tiles are filled as in the first way, the values
//   converted to float16 (activations past 65504 in magnitude would become
//   infinities: the self-check against the float kernel is what lets a
//   device use this); float32 sums, CM_K of K at a time. The sums go through
//   shared memory (c_tile) on their way to y, so that rows and columns past
//   the end are not written.
// - The int8 flavour (MMQ): the tiles hold the weights' int8 quants and the
//   activations' Q8_1 quants (wq_tile, xq_tile), each chunk's scales beside
//   them (ws_tile, xd_tile). Per 16-element half of a chunk (the unit a
//   scale covers) a subgroup multiplies int8 fragments into int32 ones, 16 /
//   CM_K products deep, and stores them in its part of ci_tile; each of its
//   invocations then takes LANE_SUMS of those integer sums and applies the
//   row's and the column's scales as chunk_dot does (an outer-product
//   rescale), into float sums in registers: the same arithmetic in the same
//   order as the int8 tiled kernel's, so the same bits. One activation plane.
//   A fragment whose K does not divide 16 (NVIDIA lists its int8 shapes at K
//   32) would add both halves' products into one sum: with PADDED_HALVES
//   each weights chunk lies in wq_tile as lo | 16 zeros | hi (W_QCHUNK 12
//   uints, the zeros written once), so that 32 of K read at the chunk's start
//   are (lo, 0) and read 16 later (0, hi), each against x's (lo, hi): each
//   half's integer sum alone, from twice the products (half of them of
//   zeros), the rescale unchanged, so the same bits. The host sets it from
//   the fragment (vkq.dispatch.tiles.TileConfig.padded_halves), and may set
//   it at any K dividing 32 (the tests check it where K divides 16).
//
// The loops inside a step have constant trip counts and are unrolled
// ([[unroll]]): lavapipe counts every iteration of a loop that remains
// against a budget per invocation (vkq/dispatch/README.md, "Limits"), and
// the dispatcher counts what is left (vkq.dispatch.tiles.loop_iterations).

#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef COOPMAT
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#ifdef MMQ
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#else
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#if defined(TEXEL_WEIGHTS) || defined(TEXEL_X)
#error "COOPMAT: through storage buffers only"
#endif
#endif

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint BM = 64;  // rows per workgroup
layout(constant_id = 2) const uint BN = 64;  // columns per workgroup
layout(constant_id = 3) const uint BK_CHUNKS = 1;  // 32-element chunks of K per step
layout(constant_id = 4) const uint TM = 4;  // rows per invocation
layout(constant_id = 5) const uint TN = 8;  // columns per invocation
// true: 4-bit quants that index 16 values pick them by selects, not table
// loads (blocks/nibble_pairs.glsl; vkq/dispatch/config.py VALUE_LOOKUPS).
layout(constant_id = 6) const bool VALUES_BY_SELECTS = false;
layout(constant_id = 7) const bool SHARED_TILES = true;
// MMQ: int8 planes per activation block (1: Q8_1 as ggml; 2: plus the
// rounding residual, q8_1.glsl).
layout(constant_id = 8) const uint X_PLANES = 1;
// MUL_MAT_ID: consecutive slots that read one vector of x (a token's used
// experts: n_used; or 1, a vector per slot).
layout(constant_id = 9) const uint SLOTS_PER_X = 1;
layout(constant_id = 10) const uint N_EXPERT = 1;  // MUL_MAT_ID: experts in the stack
// COOPMAT: the fragment shape, one the device lists (M x K times K x N).
layout(constant_id = 11) const uint CM_M = 16;
layout(constant_id = 12) const uint CM_N = 16;
layout(constant_id = 13) const uint CM_K = 16;
// COOPMAT with MMQ: the weights' chunks as lo | zeros | hi (see "Cooperative matrices").
layout(constant_id = 14) const bool PADDED_HALVES = false;

#ifdef MUL_MAT_ID
#define W_TEXEL_BINDING 4
#else
#define W_TEXEL_BINDING 3
#endif

#include "common.glsl"
#include "dequant.glsl"

#if defined(TEXEL_X)
layout(binding = 1) uniform usamplerBuffer x_u32x4;
uvec4 load_xq(uint i) { return texelFetch(x_u32x4, int(i)); }
uint x_vec4s() { return uint(textureSize(x_u32x4)); }
#else
layout(std430, binding = 1) readonly restrict buffer X { uvec4 x_words[]; };
uvec4 load_xq(uint i) { return x_words[i]; }
uint x_vec4s() { return uint(x_words.length()); }
#endif
vec4 load_x4(uint i) { return uintBitsToFloat(load_xq(i)); }
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
#ifdef MUL_MAT_ID
layout(std430, binding = 3) readonly restrict buffer Groups { uint groups[]; };  // (group_by_expert.comp's)
#endif

// XQ_BLOCK: uvec4 of x per chunk; x_col_uvec4s: between x's columns;
// W_CHUNK: uvec4 of a weights chunk in the shared tile.
#ifdef MMQ
#ifdef BLOCK_PLAIN
#error "plain types have no int8 path"
#endif
// A Q8_1 block: 2 * X_PLANES + 1 uvec4 (the quants of each plane, then d, s0, s1, d_r).
const uint XQ_BLOCK = 2u * X_PLANES + 1u;
uint x_col_uvec4s() { return XQ_BLOCK * p.x_col_stride; }  // (x_col_stride in Q8_1 blocks)
const uint W_CHUNK = 3u;  // its quants (lo, hi), then its scales
#else
const uint XQ_BLOCK = 8u;  // (32 floats)
uint x_col_uvec4s() { return p.x_col_stride / 4u; }  // (x_col_stride in floats)
const uint W_CHUNK = 8u;  // its 32 values
#endif

const uint WG_SIZE = gl_WorkGroupSize.x;  // (BM / TM) * (BN / TN), COOPMAT times the subgroup size; set by the host
const uint CHUNKS_PER_BLOCK = QK / 32u;
const uint UNIT_CHUNKS = 8u;  // chunks covered by one unit_meta
const bool WHOLE_UNITS = !SHARED_TILES && BK_CHUNKS == UNIT_CHUNKS;
const uint BK4 = BK_CHUNKS * 8u;  // vec4s of K per step
const uint X_STEP = BK_CHUNKS * XQ_BLOCK;  // uvec4 of a column of x per step
// uvec4 between the rows (and the columns) of a tile in shared memory: an
// odd number (one of padding where a step's are even), so that invocations
// reading neighbouring rows (columns) at one K hit different banks.
// vkq.dispatch.tiles.TileConfig.shared_memory_bytes counts the same.
#ifdef COOPMAT
// (float16 vec4s: rows of BK + 8 halves, 16-byte aligned as fragment loads want)
const uint W_STRIDE = BK4 + 2u;
const uint X_STRIDE = BK4 + 2u;
#else
const uint W_STRIDE = (BK_CHUNKS * W_CHUNK) | 1u;
const uint X_STRIDE = X_STEP | 1u;
#endif
const uint ROW_THREADS = BM / TM;
// What each invocation copies into shared memory per step: chunks of
// weights, uvec4 of x.
const uint W_ITEMS = (BM * BK_CHUNKS + WG_SIZE - 1u) / WG_SIZE;
const uint X_ITEMS = (BN * X_STEP + WG_SIZE - 1u) / WG_SIZE;

#ifdef COOPMAT
const uint FM = TM / CM_M, FN = TN / CM_N;  // a subgroup's fragments
const uint SUBGROUPS = (BM / TM) * (BN / TN);
const uint SG = WG_SIZE / SUBGROUPS;  // the subgroup size the host assumed
#endif
#if defined(COOPMAT) && defined(MMQ)
// A row of weights (a column of x) of one step: its int8 quants, 32 bytes a
// chunk (48 with PADDED_HALVES: lo, 16 zeros, hi), then 16 bytes of padding
// (fragment rows stay 16-byte aligned).
const uint W_QCHUNK = PADDED_HALVES ? 12u : 8u;  // (uints)
const uint WQ_STRIDE = BK_CHUNKS * W_QCHUNK + 4u;
const uint Q_STRIDE = BK_CHUNKS * 8u + 4u;
// K per half chunk that a subgroup's products span: 32 (a whole chunk of x)
// with PADDED_HALVES, else the half's 16.
const uint HALF_DEPTH = PADDED_HALVES ? 32u : 16u;
shared uint wq_tile[BM * WQ_STRIDE];
shared vec4 ws_tile[BM * BK_CHUNKS];  // each chunk's scales (block_scales)
shared uint xq_tile[BN * Q_STRIDE];
shared vec4 xd_tile[BN * BK_CHUNKS];  // each chunk's (d, s0, s1, d_r)
shared int ci_tile[BM * BN];  // each subgroup's TM x TN integer sums of a half chunk (column-major)
const uint LANE_SUMS = TM * TN / SG;  // an invocation's sums (the host makes TM x TN a multiple of SG)
float acc[LANE_SUMS];
float half_lo[LANE_SUMS];  // so.x * the first half's integer sum, until the second half's
#elif defined(COOPMAT)
shared f16vec4 w_tile[BM * W_STRIDE];
shared f16vec4 x_tile[BN * X_STRIDE];
shared float c_tile[BM * BN];  // the sums on their way to y (column-major)
#define PUT_W(at, v) w_tile[at] = f16vec4(v)
#define PUT_X(at, v) x_tile[at] = f16vec4(uintBitsToFloat(v))

coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> sums[FM * FN];
#else
// (float values as their bits in the float flavour: one copy of x for both)
shared uvec4 w_tile[SHARED_TILES ? BM * W_STRIDE : 1u];
shared uvec4 x_tile[SHARED_TILES ? BN * X_STRIDE : 1u];
#define PUT_W(at, v) w_tile[at] = floatBitsToUint(v)
#define PUT_X(at, v) x_tile[at] = (v)

float acc[TM * TN];
#endif
// tile_cols: the columns of this workgroup's tile that exist (1..BN);
// block0: the first block of the expert (MUL_MAT_ID), else 0.
uint row0, col0, tr, tc, nchunks, tile_cols, block0;

// The row of W for the invocation's i-th row (past the end: the last row).
uint w_row(uint i) { return min(row0 + tr + i * ROW_THREADS, p.nrows - 1u); }
// The first block of row `row` of W (of the expert).
uint w_block(uint row) { return block0 + row * p.nblocks; }

#ifdef MUL_MAT_ID
uint first_slot;  // where the tile's expert's slots start in the sorted slots

// Finds tile `tile` of the sorted slots: sets block0, col0 and first_slot,
// returns its column count (0: past the last tile; uniform).
uint find_tile(uint tile) {
    uint start = N_EXPERT;
    for (uint e = 0u; e < N_EXPERT; e++) {
        const uint n = groups[e];
        const uint tiles = (n + BN - 1u) / BN;
        if (tile < tiles) {
            block0 = e * p.nrows * p.nblocks;
            col0 = tile * BN;
            first_slot = start;
            return min(n - col0, BN);
        }
        tile -= tiles;
        start += n;
    }
    return 0u;
}
// Column c of the tile (c < tile_cols): its vector of x, its vector of y.
uint y_column(uint c) { return groups[first_slot + col0 + c]; }
uint x_column(uint c) { return y_column(c) / SLOTS_PER_X; }
#else
uint x_column(uint c) { return col0 + c; }
uint y_column(uint c) { return col0 + c; }
#endif

#ifdef MMQ
// A column's Q8_1 block of one chunk: the quants of each plane, (d, s0, s1, d_r).
struct XBlock { uvec4 q_lo, q_hi, r_lo, r_hi; vec4 ds; };

// Block b (uvec4 index of its first) from x, or from the shared tile.
XBlock x_block(uint b) {
    return XBlock(load_xq(b), load_xq(b + 1u), X_PLANES == 2u ? load_xq(b + 2u) : uvec4(0u),
                  X_PLANES == 2u ? load_xq(b + 3u) : uvec4(0u), uintBitsToFloat(load_xq(b + XQ_BLOCK - 1u)));
}
#ifndef COOPMAT
XBlock x_block_shared(uint b) {
    return XBlock(x_tile[b], x_tile[b + 1u], X_PLANES == 2u ? x_tile[b + 2u] : uvec4(0u),
                  X_PLANES == 2u ? x_tile[b + 3u] : uvec4(0u), uintBitsToFloat(x_tile[b + XQ_BLOCK - 1u]));
}
#endif

// One chunk's contribution to a sum, as the int8 mat-vec's:
// sum (scale*q + offset) * d*qx = d * (scale*dot(q, qx) + offset*s), s in
// units of d; d last, so that nothing before it grows with x. Both ways of
// feeding call it and add it to their sums chunk by chunk, so that they give
// the same bits: `precise` keeps the compiler from contracting its products
// and the sum's addition into fused multiply-adds, which it did in one way
// and not the other (lavapipe: 1-2 ulp apart in ~1% of the outputs; not
// measurably slower there).
float chunk_dot(Quants q, vec4 so, XBlock x) {
    precise float v = x.ds.x * (so.x * float(dot16x8(q.lo, x.q_lo)) + so.z * float(dot16x8(q.hi, x.q_hi))
                        + so.y * x.ds.y + so.w * x.ds.z);
    if (X_PLANES == 2u) {
        v += x.ds.w * (so.x * float(dot16x8(q.lo, x.r_lo)) + so.z * float(dot16x8(q.hi, x.r_hi)));
    }
    return v;
}
#endif

#if !(defined(COOPMAT) && defined(MMQ))
// SHARED_TILES: the step at chunk c0, through shared memory.
void step_shared(uint c0) {
    [[unroll]] for (uint n = 0u; n < W_ITEMS; n++) {
        const uint i = gl_LocalInvocationID.x + n * WG_SIZE;
        if (i >= BM * BK_CHUNKS) {
            break;
        }
        // Neighbouring invocations on neighbouring rows of one chunk.
        const uint r = i % BM, j = i / BM;
        const uint c = c0 + j;
        const uint at = r * W_STRIDE + j * W_CHUNK;
        const uint row = min(row0 + r, p.nrows - 1u);
        const uint ib = w_block(row) + c / CHUNKS_PER_BLOCK, sb = c % CHUNKS_PER_BLOCK;
#ifdef MMQ
        // (a chunk past the end of K is not stored: the dot products stop before it)
        if (c < nchunks) {
            const Quants q = block_quants(ib, sb);
            w_tile[at] = q.lo;
            w_tile[at + 1u] = q.hi;
            w_tile[at + 2u] = floatBitsToUint(block_scales(ib, sb));
        }
#else
        vec4 v[8];
        if (c < nchunks) {
            dequant_chunk(ib, sb, v);
        } else {
            [[unroll]] for (uint q = 0u; q < 8u; q++) {
                v[q] = vec4(0.0);
            }
        }
        [[unroll]] for (uint q = 0u; q < 8u; q++) {
            PUT_W(at + q, v[q]);
        }
#endif
    }
    [[unroll]] for (uint n = 0u; n < X_ITEMS; n++) {
        const uint i = gl_LocalInvocationID.x + n * WG_SIZE;
        if (i >= BN * X_STEP) {
            break;
        }
        // Neighbouring invocations on neighbouring uvec4 of a column (its
        // chunks' values, or its Q8_1 blocks, lie one after the other).
        const uint col = i / X_STEP, q = i % X_STEP;
        const uint c = c0 + q / XQ_BLOCK;
        // (a column past the end reads zeros: its sums are not written)
        PUT_X(col * X_STRIDE + q, col < tile_cols && c < nchunks
            ? load_xq(x_column(col) * x_col_uvec4s() + c0 * XQ_BLOCK + q)
            : uvec4(0u));
    }
    barrier();
#if defined(COOPMAT)
    // (uniform in each subgroup)
    if (gl_SubgroupID < SUBGROUPS) {
        const uint r0 = (gl_SubgroupID % (BM / TM)) * TM, n0 = (gl_SubgroupID / (BM / TM)) * TN;
        [[unroll]] for (uint k = 0u; k < BK4; k += CM_K / 4u) {  // (CM_K of K: CM_K / 4 vec4s)
            coopmat<float16_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA> a[FM];
            coopmat<float16_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB> b[FN];
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                coopMatLoad(a[i], w_tile, (r0 + i * CM_M) * W_STRIDE + k, W_STRIDE,
                            gl_CooperativeMatrixLayoutRowMajor);
            }
            [[unroll]] for (uint j = 0u; j < FN; j++) {
                coopMatLoad(b[j], x_tile, (n0 + j * CM_N) * X_STRIDE + k, X_STRIDE,
                            gl_CooperativeMatrixLayoutColumnMajor);
            }
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    sums[i * FN + j] = coopMatMulAdd(a[i], b[j], sums[i * FN + j]);
                }
            }
        }
    }
#elif defined(MMQ)
    [[unroll]] for (uint j = 0u; j < BK_CHUNKS; j++) {
        if (c0 + j >= nchunks) {
            break;  // (uniform)
        }
        Quants q[TM];
        vec4 so[TM];
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            const uint at = (tr + i * ROW_THREADS) * W_STRIDE + j * W_CHUNK;
            q[i] = Quants(w_tile[at], w_tile[at + 1u]);
            so[i] = uintBitsToFloat(w_tile[at + 2u]);
        }
        [[unroll]] for (uint col = 0u; col < TN; col++) {
            const XBlock xb = x_block_shared((tc * TN + col) * X_STRIDE + j * XQ_BLOCK);
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                acc[i * TN + col] += chunk_dot(q[i], so[i], xb);
            }
        }
    }
#else
    [[unroll]] for (uint q = 0u; q < BK4; q++) {
        vec4 a[TM], b[TN];
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            a[i] = uintBitsToFloat(w_tile[(tr + i * ROW_THREADS) * W_STRIDE + q]);
        }
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            b[j] = uintBitsToFloat(x_tile[(tc * TN + j) * X_STRIDE + q]);
        }
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            [[unroll]] for (uint j = 0u; j < TN; j++) {
                acc[i * TN + j] += dot(a[i], b[j]);
            }
        }
    }
#endif
    barrier();
}

#endif

#if defined(COOPMAT) && defined(MMQ)
// The int8 flavour's step at chunk c0 (see "Cooperative matrices").
void step_coopmat_int8(uint c0) {
    [[unroll]] for (uint n = 0u; n < W_ITEMS; n++) {
        const uint i = gl_LocalInvocationID.x + n * WG_SIZE;
        if (i >= BM * BK_CHUNKS) {
            break;
        }
        const uint r = i % BM, j = i / BM;
        const uint c = c0 + j;
        const uint row = min(row0 + r, p.nrows - 1u);
        const uint ib = w_block(row) + c / CHUNKS_PER_BLOCK, sb = c % CHUNKS_PER_BLOCK;
        // (a chunk past the end of K is not stored: the products stop before it)
        if (c < nchunks) {
            const Quants q = block_quants(ib, sb);
            const uint at = r * WQ_STRIDE + j * W_QCHUNK;
            [[unroll]] for (uint w = 0u; w < 4u; w++) {
                wq_tile[at + w] = q.lo[w];
                wq_tile[at + W_QCHUNK - 4u + w] = q.hi[w];
            }
            ws_tile[r * BK_CHUNKS + j] = block_scales(ib, sb);
        }
    }
    [[unroll]] for (uint n = 0u; n < (BN * BK_CHUNKS + WG_SIZE - 1u) / WG_SIZE; n++) {
        const uint i = gl_LocalInvocationID.x + n * WG_SIZE;
        if (i >= BN * BK_CHUNKS) {
            break;
        }
        // Neighbouring invocations on neighbouring chunks of a column.
        const uint col = i / BK_CHUNKS, j = i % BK_CHUNKS;
        const uint c = c0 + j;
        // (a column past the end reads zeros: its sums are not written)
        const bool real = col < tile_cols && c < nchunks;
        const uint b = x_column(min(col, tile_cols - 1u)) * x_col_uvec4s() + c * XQ_BLOCK;
        const uvec4 lo = real ? load_xq(b) : uvec4(0u), hi = real ? load_xq(b + 1u) : uvec4(0u);
        const uint at = col * Q_STRIDE + j * 8u;
        [[unroll]] for (uint w = 0u; w < 4u; w++) {
            xq_tile[at + w] = lo[w];
            xq_tile[at + 4u + w] = hi[w];
        }
        xd_tile[col * BK_CHUNKS + j] = real ? uintBitsToFloat(load_xq(b + XQ_BLOCK - 1u)) : vec4(0.0);
    }
    barrier();
    // (uniform in each subgroup)
    if (gl_SubgroupID < SUBGROUPS) {
        const uint r0 = (gl_SubgroupID % (BM / TM)) * TM, n0 = (gl_SubgroupID / (BM / TM)) * TN;
        const uint mine = gl_SubgroupID * TM * TN;  // this subgroup's part of ci_tile
        [[unroll]] for (uint j = 0u; j < BK_CHUNKS; j++) {
            if (c0 + j >= nchunks) {
                break;  // (uniform)
            }
            [[unroll]] for (uint h = 0u; h < 2u; h++) {
                coopmat<int, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator> isum[FM * FN];
                [[unroll]] for (uint f = 0u; f < FM * FN; f++) {
                    isum[f] = coopmat<int, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>(0);
                }
                [[unroll]] for (uint k = 0u; k < HALF_DEPTH; k += CM_K) {
                    // (uints into a row's quants: the half's own, or with
                    // PADDED_HALVES the whole chunk of x against (lo, 0) or (0, hi))
                    const uint kw = j * W_QCHUNK + h * 4u + k / 4u;
                    const uint kx = j * 8u + (PADDED_HALVES ? 0u : h * 4u) + k / 4u;
                    coopmat<int8_t, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA> a[FM];
                    coopmat<int8_t, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB> b[FN];
                    [[unroll]] for (uint i = 0u; i < FM; i++) {
                        coopMatLoad(a[i], wq_tile, (r0 + i * CM_M) * WQ_STRIDE + kw, WQ_STRIDE,
                                    gl_CooperativeMatrixLayoutRowMajor);
                    }
                    [[unroll]] for (uint jn = 0u; jn < FN; jn++) {
                        coopMatLoad(b[jn], xq_tile, (n0 + jn * CM_N) * Q_STRIDE + kx, Q_STRIDE,
                                    gl_CooperativeMatrixLayoutColumnMajor);
                    }
                    [[unroll]] for (uint i = 0u; i < FM; i++) {
                        [[unroll]] for (uint jn = 0u; jn < FN; jn++) {
                            isum[i * FN + jn] = coopMatMulAdd(a[i], b[jn], isum[i * FN + jn]);
                        }
                    }
                }
                [[unroll]] for (uint i = 0u; i < FM; i++) {
                    [[unroll]] for (uint jn = 0u; jn < FN; jn++) {
                        coopMatStore(isum[i * FN + jn], ci_tile, mine + (jn * CM_N) * TM + i * CM_M, TM,
                                     gl_CooperativeMatrixLayoutColumnMajor);
                    }
                }
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                // The rescale, as chunk_dot: d * (so.x * lo + so.z * hi + so.y * s0 + so.w * s1).
                [[unroll]] for (uint t = 0u; t < LANE_SUMS; t++) {
                    const uint e = gl_SubgroupInvocationID + t * SG;
                    const vec4 so = ws_tile[(r0 + e % TM) * BK_CHUNKS + j];
                    const float isum_e = float(ci_tile[mine + e]);
                    if (h == 0u) {
                        precise float lo = so.x * isum_e;
                        half_lo[t] = lo;
                    } else {
                        const vec4 ds = xd_tile[(n0 + e / TM) * BK_CHUNKS + j];
                        precise float v = ds.x * (half_lo[t] + so.z * isum_e + so.y * ds.y + so.w * ds.z);
                        acc[t] += v;
                    }
                }
                subgroupBarrier();  // (before the next half's sums overwrite these)
            }
        }
    }
    barrier();
}
#endif

#ifdef COOPMAT
void step_registers(uint c0) {}  // (never called: COOPMAT takes shared tiles only)
#else
// Not SHARED_TILES: the step at chunk c0, from registers and memory.
void step_registers(uint c0) {
#ifndef BLOCK_PLAIN
    UnitMeta meta[TM];
    if (WHOLE_UNITS) {
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            meta[i] = unit_meta(w_block(w_row(i)) + c0 / CHUNKS_PER_BLOCK);
        }
    }
#endif
    [[unroll]] for (uint j = 0u; j < BK_CHUNKS; j++) {
        const uint c = c0 + j;
        if (!WHOLE_UNITS && c >= nchunks) {
            break;
        }
        // (with whole units, c0 is a multiple of 8 and j a constant)
        const uint sb = WHOLE_UNITS ? j % CHUNKS_PER_BLOCK : c % CHUNKS_PER_BLOCK;
#ifdef MMQ
        Quants q[TM];
        vec4 so[TM];
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            const uint ib = w_block(w_row(i)) + c / CHUNKS_PER_BLOCK;
#ifdef META_QUANTS
            q[i] = WHOLE_UNITS ? meta_quants(meta[i], j) : block_quants(ib, sb);
#else
            q[i] = block_quants(ib, sb);
#endif
            so[i] = WHOLE_UNITS ? meta_scales(meta[i], j) : block_scales(ib, sb);
        }
        [[unroll]] for (uint col = 0u; col < TN; col++) {
            // One Q8_1 block of the column (past the end: the last column's, not written).
            const XBlock xb = x_block(x_column(min(tc * TN + col, tile_cols - 1u)) * x_col_uvec4s() + c * XQ_BLOCK);
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                acc[i * TN + col] += chunk_dot(q[i], so[i], xb);
            }
        }
#else
        vec4 wv[TM][8];
        [[unroll]] for (uint i = 0u; i < TM; i++) {
            const uint ib = w_block(w_row(i)) + c / CHUNKS_PER_BLOCK;
#ifdef BLOCK_PLAIN
            dequant_chunk(ib, sb, wv[i]);
#else
            if (WHOLE_UNITS) {
                dequant_unit_chunk(meta[i], j, ib, sb, wv[i]);
            } else {
                dequant_chunk(ib, sb, wv[i]);
            }
#endif
        }
        [[unroll]] for (uint col = 0u; col < TN; col++) {
            // (a column past the end repeats the last one; it is not written)
            const uint x4 = x_column(min(tc * TN + col, tile_cols - 1u)) * x_col_uvec4s() + c * 8u;
            vec4 xv[8];
            [[unroll]] for (uint q = 0u; q < 8u; q++) {
                xv[q] = load_x4(x4 + q);
            }
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                acc[i * TN + col] += dot(wv[i][0], xv[0]) + dot(wv[i][1], xv[1]) + dot(wv[i][2], xv[2])
                                   + dot(wv[i][3], xv[3]) + dot(wv[i][4], xv[4]) + dot(wv[i][5], xv[5])
                                   + dot(wv[i][6], xv[6]) + dot(wv[i][7], xv[7]);
            }
        }
#endif
    }
}
#endif

void main() {
    const uint tid = gl_LocalInvocationID.x;
    row0 = (gl_WorkGroupID.z * gl_NumWorkGroups.x + gl_WorkGroupID.x) * BM;
    if (row0 >= p.nrows) {
        return;  // uniform across the workgroup: no barrier is skipped by part of it
    }
    block0 = 0u;
    col0 = gl_WorkGroupID.y * BN;
    // (tc a constant where the workgroup has one column group, so that the
    // compiler sees the same x addresses in all its invocations)
    tr = tid % ROW_THREADS;
    tc = TN == BN ? 0u : tid / ROW_THREADS;
    nchunks = p.nblocks * CHUNKS_PER_BLOCK;
#ifdef MUL_MAT_ID
    tile_cols = find_tile(gl_WorkGroupID.y);
    if (tile_cols == 0u) {
        return;  // (uniform)
    }
#else
    const uint ncols = x_vec4s() / x_col_uvec4s();
    tile_cols = min(ncols - col0, BN);
#endif

#if defined(COOPMAT) && defined(MMQ)
    [[unroll]] for (uint t = 0u; t < LANE_SUMS; t++) {
        acc[t] = 0.0;
    }
    if (PADDED_HALVES) {  // the zeros between each chunk's halves, once (the first step's barrier follows)
        [[unroll]] for (uint n = 0u; n < (BM * BK_CHUNKS * 4u + WG_SIZE - 1u) / WG_SIZE; n++) {
            const uint i = tid + n * WG_SIZE;
            if (i >= BM * BK_CHUNKS * 4u) {
                break;
            }
            wq_tile[(i / (BK_CHUNKS * 4u)) * WQ_STRIDE + (i / 4u % BK_CHUNKS) * W_QCHUNK + 4u + i % 4u] = 0u;
        }
    }
    for (uint c0 = 0u; c0 < nchunks; c0 += BK_CHUNKS) {
        step_coopmat_int8(c0);
    }
    if (gl_SubgroupID < SUBGROUPS) {
        const uint r0 = (gl_SubgroupID % (BM / TM)) * TM, n0 = (gl_SubgroupID / (BM / TM)) * TN;
        [[unroll]] for (uint t = 0u; t < LANE_SUMS; t++) {
            const uint e = gl_SubgroupInvocationID + t * SG;
            const uint row = row0 + r0 + e % TM, col = n0 + e / TM;
            if (row < p.nrows && col < tile_cols) {
                y[p.y_row_offset + y_column(col) * p.y_col_stride + row] = acc[t];
            }
        }
    }
#else
#ifdef COOPMAT
    [[unroll]] for (uint f = 0u; f < FM * FN; f++) {
        sums[f] = coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>(0.0);
    }
#else
    [[unroll]] for (uint i = 0u; i < TM * TN; i++) {
        acc[i] = 0.0;
    }
#endif
    for (uint c0 = 0u; c0 < nchunks; c0 += BK_CHUNKS) {
        if (SHARED_TILES) {
            step_shared(c0);
        } else {
            step_registers(c0);
        }
    }

#ifdef COOPMAT
    if (gl_SubgroupID < SUBGROUPS) {
        const uint r0 = (gl_SubgroupID % (BM / TM)) * TM, n0 = (gl_SubgroupID / (BM / TM)) * TN;
        [[unroll]] for (uint i = 0u; i < FM; i++) {
            [[unroll]] for (uint j = 0u; j < FN; j++) {
                coopMatStore(sums[i * FN + j], c_tile, (n0 + j * CM_N) * BM + r0 + i * CM_M, BM,
                             gl_CooperativeMatrixLayoutColumnMajor);
            }
        }
    }
    barrier();
    // (neighbouring invocations on neighbouring rows of a column: y's order)
    for (uint i = tid; i < BM * BN; i += WG_SIZE) {
        const uint row = row0 + i % BM, col = i / BM;
        if (row < p.nrows && col < tile_cols) {
            y[p.y_row_offset + y_column(col) * p.y_col_stride + row] = c_tile[i];
        }
    }
#else
    [[unroll]] for (uint i = 0u; i < TM; i++) {
        const uint row = row0 + tr + i * ROW_THREADS;
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            const uint col = tc * TN + j;
            if (row < p.nrows && col < tile_cols) {
                y[p.y_row_offset + y_column(col) * p.y_col_stride + row] = acc[i * TN + j];
            }
        }
    }
#endif
#endif
}
