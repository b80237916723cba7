#version 450
// Sampling on the device: llama.cpp's sampler chain over each of n vectors
// of logits (vkq/llama/sampling.py says the chain and its definitions; its
// numpy sampler computes what this computes, in the same float32 order).
// One workgroup per vector:
//   1. the repeat penalty's window: the last `last_n` tokens up to the
//      vector's own, read from a ring of recent tokens (slot position %
//      RING), its penalized logits kept in shared memory, and a bit set per
//      id (mod BITS) so that a value's lookup scans the window only when
//      its bit is set; the vector's token is then written into the ring
//      (write_ring: the next step of a chain reads it there);
//   2. the k-th largest (penalized) value by radix select on order-keeping
//      uint keys, 8 bits a pass: a histogram of the keys that match the
//      digits chosen so far picks the next digit;
//   3. the candidates: every key above that one, and of the keys equal to
//      it the lowest ids (atomically appended where all of them fit, else
//      each invocation a contiguous range of ids, in order);
//   4. a bitonic sort of the candidates: larger values first, equal values
//      the lower id first;
//   5. one invocation: top-p, min-p and the temperature over the sorted
//      candidates, and the draw with u = uniform(seed, position).
//
// On a GPU one workgroup over a 49k-128k vocabulary would leave the device
// idle for six passes of hundreds of dependent loads, so there (PASS 1 and
// 2, as shaders/argmax.comp splits) the vocabulary is cut into `parts`
// ranges: workgroup (part, vector) takes steps 1 to 4 over its range and
// writes its k candidates, sorted (fewer values: padded with -inf and id
// NONE, which come after every real one), to the scratch; then one
// workgroup per vector takes steps 2 to 5 over the parts' candidates. The
// union of the ranges' top k holds the top k: the token is PASS 0's.
// PASS 0: one workgroup per vector takes it all (a CPU driver's launch).
//
// Bindings: 0 logits, 1 tokens (int32), 2 positions (int32), 3 params
// (uint32 words, Sampling.params), 4 ring (int32, RING slots; -1: none),
// 5 out (int32 per vector), 6 scratch (PASS 1 and 2: (value bits, id) per
// candidate, CAP per part and vector).

layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint PASS = 0;

layout(std430, binding = 0) readonly restrict buffer X { float x[]; };
layout(std430, binding = 1) readonly restrict buffer Tokens { int tokens[]; };
layout(std430, binding = 2) readonly restrict buffer Positions { int positions[]; };
layout(std430, binding = 3) readonly restrict buffer Params { uint params[]; };
layout(std430, binding = 4) restrict buffer Ring { int ring[]; };
layout(std430, binding = 5) writeonly restrict buffer Out { int o[]; };
layout(std430, binding = 6) restrict buffer Scratch { uvec2 scratch[]; };

layout(push_constant) uniform Push {
    uint n_vocab;  // values per vector
    uint x_off, x_stride;  // first value of vector 0, and floats between vectors
    uint tok_off;  // the index of vector 0's token and position
    uint write_ring;  // 1: write each vector's token into the ring (a decode step's one vector)
    uint parts;  // PASS 1 and 2: ranges per vector
} p;

const uint WG_SIZE = gl_WorkGroupSize.x;
const uint CAP = 1024u;  // candidates (sampling.TOP_K_MAX)
const uint RING = 256u;  // ring slots (sampling.REPEAT_LAST_N_MAX)
const uint BITS = 4096u;  // the window's bit set, ids mod BITS
const uint NONE = 0xFFFFFFFFu;

shared float cand_value[CAP];
shared uint cand_id[CAP];
shared uint hist[256];
shared int win[RING];
shared float win_value[RING];
shared uint win_bits[BITS / 32u];
shared uint s_digit, s_remaining, s_equal, s_count;
shared uint s_ranks[WG_SIZE];

uint g_last_n;
uint g_xb;  // the vector's first logit
uint g_lo;  // the source's first index: the part's first id (PASS 0, 1), the vector's first candidate (PASS 2)
uint g_k;  // PASS 2: candidates per part

uint fmix32(uint h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

// The (penalized) logit of id i.
float logit(uint i) {
    const float l = x[g_xb + i];
    if ((win_bits[(i % BITS) >> 5] & (1u << (i & 31u))) != 0u) {
        for (uint j = 0u; j < g_last_n; ++j) {
            if (win[j] == int(i)) {
                return win_value[j];
            }
        }
    }
    return l;
}

// Source entry i (0 .. its length): a logit of the part's range, or (PASS 2) a part's candidate.
uvec2 scratch_entry(uint i) {
    return scratch[g_lo + (i / g_k) * CAP + i % g_k];
}

float source_value(uint i) {
    return PASS == 2u ? uintBitsToFloat(scratch_entry(i).x) : logit(g_lo + i);
}

uint source_id(uint i) {
    return PASS == 2u ? scratch_entry(i).y : g_lo + i;
}

// A uint whose order is the float order (negative values reversed).
uint key_of(float v) {
    const uint b = floatBitsToUint(v);
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// Entry (key, id) a comes before entry b: a larger value, or an equal one and a lower id.
bool ahead(uint ka, uint ia, uint kb, uint ib) {
    return ka != kb ? ka > kb : ia < ib;
}

// Candidate a comes before candidate b.
bool before(uint a, uint b) {
    return ahead(key_of(cand_value[a]), cand_id[a], key_of(cand_value[b]), cand_id[b]);
}

// The k entries of the source (length n) that come first (steps 2 and 3), into
// cand_value/cand_id[0 .. k), in no order. (Called by the whole workgroup.)
void select_first(uint n, uint k) {
    const uint tid = gl_LocalInvocationID.x;
    // 2. The k-th key, 8 bits a pass from the top.
    uint prefix = 0u, mask = 0u, remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint d = tid; d < 256u; d += WG_SIZE) {
            hist[d] = 0u;
        }
        barrier();
        for (uint i = tid; i < n; i += WG_SIZE) {
            const uint key = key_of(source_value(i));
            if ((key & mask) == prefix) {
                atomicAdd(hist[(key >> uint(shift)) & 255u], 1u);
            }
        }
        memoryBarrierShared();
        barrier();
        if (tid == 0u) {
            uint above = 0u, d = 255u;
            for (;; --d) {
                if (above + hist[d] >= remaining || d == 0u) {
                    break;
                }
                above += hist[d];
            }
            s_digit = d;
            s_remaining = remaining - above;
            s_equal = hist[d];
        }
        memoryBarrierShared();
        barrier();
        prefix |= s_digit << uint(shift);
        mask |= 255u << uint(shift);
        remaining = s_remaining;
    }
    // (prefix: the k-th key; remaining: how many of the keys equal to it are taken, the lowest ids)
    const uint n_equal = s_equal;
    const uint n_above = k - remaining;

    // 3. The candidates: every key above the k-th, and of those equal to it the lowest ids. Where
    // they all fit they are taken and the sort orders them; else they are ranked by index, which
    // among equal values is id order: a logit's index is its id, and PASS 2's entries are the
    // parts' sorted candidates, part after part (the parts' ranges in id order).
    if (tid == 0u) {
        s_count = 0u;
    }
    memoryBarrierShared();
    barrier();
    const bool all_equal = n_above + n_equal <= CAP;
    for (uint i = tid; i < n; i += WG_SIZE) {
        const float val = source_value(i);
        const uint key = key_of(val);
        if (key > prefix || (all_equal && key == prefix)) {
            const uint at = atomicAdd(s_count, 1u);
            cand_value[at] = val;
            cand_id[at] = source_id(i);
        }
    }
    memoryBarrierShared();
    barrier();
    if (!all_equal) {
        // The lowest ids of the equal keys: each invocation a contiguous range, ranked in index order.
        const uint span = (n + WG_SIZE - 1u) / WG_SIZE;
        const uint i0 = min(tid * span, n), i1 = min(i0 + span, n);
        uint mine = 0u;
        for (uint i = i0; i < i1; ++i) {
            mine += key_of(source_value(i)) == prefix && source_id(i) != NONE ? 1u : 0u;
        }
        s_ranks[tid] = mine;
        memoryBarrierShared();
        barrier();
        if (tid == 0u) {
            uint sum = 0u;
            for (uint t = 0u; t < WG_SIZE; ++t) {
                const uint c = s_ranks[t];
                s_ranks[t] = sum;
                sum += c;
            }
        }
        memoryBarrierShared();
        barrier();
        uint rank = s_ranks[tid];
        const uint base = s_count;
        for (uint i = i0; i < i1 && rank < remaining; ++i) {
            const float val = source_value(i);
            if (key_of(val) == prefix && source_id(i) != NONE) {  // (PASS 2: no part's padding)
                cand_value[base + rank] = val;
                cand_id[base + rank] = source_id(i);
                ++rank;
            }
        }
        memoryBarrierShared();
        barrier();
        if (tid == 0u) {
            s_count = base + remaining;
        }
        memoryBarrierShared();
        barrier();
    }
}

// The first `count` candidates sorted (step 4): a bitonic sort over the next power of two, padded with
// entries after every other (-inf, id NONE). (Called by the whole workgroup.)
void sort_candidates(uint count) {
    const uint tid = gl_LocalInvocationID.x;
    uint size = 1u;
    while (size < count) {
        size <<= 1;
    }
    for (uint i = count + tid; i < size; i += WG_SIZE) {
        cand_value[i] = uintBitsToFloat(0xFF800000u);  // -inf
        cand_id[i] = NONE;
    }
    memoryBarrierShared();
    barrier();
    for (uint block = 2u; block <= size; block <<= 1) {
        for (uint stride = block >> 1; stride > 0u; stride >>= 1) {
            for (uint t = tid; t < size / 2u; t += WG_SIZE) {
                const uint lo = 2u * stride * (t / stride) + t % stride;
                const uint hi = lo + stride;
                const bool ascending = (lo & block) == 0u;
                if (before(hi, lo) == ascending) {
                    const float fv = cand_value[lo];
                    const uint fi = cand_id[lo];
                    cand_value[lo] = cand_value[hi];
                    cand_id[lo] = cand_id[hi];
                    cand_value[hi] = fv;
                    cand_id[hi] = fi;
                }
            }
            memoryBarrierShared();
            barrier();
        }
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint v = PASS == 1u ? gl_WorkGroupID.y : gl_WorkGroupID.x;
    const uint part = PASS == 1u ? gl_WorkGroupID.x : 0u;
    const uint n = p.n_vocab;
    g_xb = p.x_off + v * p.x_stride;
    const int pos = positions[p.tok_off + v];
    const int token = tokens[p.tok_off + v];
    const uint top_k = params[0];
    const float top_p = uintBitsToFloat(params[1]);
    const bool top_p_on = params[2] != 0u;
    const float log_min_p = uintBitsToFloat(params[3]);
    const bool min_p_on = params[4] != 0u;
    const float inv_temp = uintBitsToFloat(params[5]);
    const float penalty = uintBitsToFloat(params[6]);
    const float inv_penalty = uintBitsToFloat(params[7]);
    g_last_n = min(params[8], RING);
    const uint seed = params[9];
    const uint k = min(max(top_k, 1u), min(n, CAP));

    uint kept = k;  // the candidates this workgroup selects
    if (PASS != 2u) {
        // 1. The window and its penalized logits.
        for (uint w = tid; w < BITS / 32u; w += WG_SIZE) {
            win_bits[w] = 0u;
        }
        barrier();
        for (uint j = tid; j < g_last_n; j += WG_SIZE) {
            const int q = pos - int(j);
            const int t = q < 0 ? -1 : (j == 0u ? token : ring[uint(q) % RING]);
            win[j] = t;
            if (t >= 0 && uint(t) < n) {
                const float l = x[g_xb + uint(t)];
                win_value[j] = l <= 0.0 ? l * penalty : l * inv_penalty;
                atomicOr(win_bits[(uint(t) % BITS) >> 5], 1u << (uint(t) & 31u));
            } else {
                win[j] = -1;
            }
        }
        memoryBarrierShared();
        barrier();
        if (PASS == 0u && p.write_ring != 0u && tid == 0u && pos >= 0) {
            ring[uint(pos) % RING] = token;  // (every read of the ring above is done)
        }
        const uint span = PASS == 1u ? (n + p.parts - 1u) / p.parts : n;
        g_lo = min(part * span, n);
        const uint len = min(span, n - g_lo);
        kept = min(k, len);
        if (kept > 0u) {
            select_first(len, kept);
        }
    } else {
        g_lo = v * p.parts * CAP;
        g_k = k;
        select_first(p.parts * k, k);
    }
    const uint count = kept > 0u ? s_count : 0u;
    sort_candidates(count);
    if (PASS == 1u) {
        // The part's k candidates, sorted (padded after fewer).
        const uint at = (v * p.parts + part) * CAP;
        for (uint j = tid; j < k; j += WG_SIZE) {
            scratch[at + j] = j < kept ? uvec2(floatBitsToUint(cand_value[j]), cand_id[j])
                                       : uvec2(0xFF800000u, NONE);
        }
        return;
    }
    if (PASS == 2u && p.write_ring != 0u && tid == 0u && pos >= 0) {
        ring[uint(pos) % RING] = token;
    }

    // 5. top-p, min-p, temperature and the draw.
    if (tid != 0u) {
        return;
    }
    uint m = min(k, count);
    const float l0 = cand_value[0];
    uint choice = 0u;
    if (inv_temp != 0.0 && m > 1u) {
        if (top_p_on) {
            float total = 0.0;
            for (uint i = 0u; i < m; ++i) {
                total += exp(cand_value[i] - l0);
            }
            const float bound = top_p * total;
            float sum = 0.0;
            for (uint i = 0u; i < m; ++i) {
                sum += exp(cand_value[i] - l0);
                if (sum >= bound) {
                    m = i + 1u;
                    break;
                }
            }
        }
        if (min_p_on) {
            const float bound = l0 + log_min_p;
            uint j = 1u;
            while (j < m && cand_value[j] >= bound) {
                ++j;
            }
            m = j;
        }
        float z = 0.0;
        for (uint i = 0u; i < m; ++i) {
            z += exp((cand_value[i] - l0) * inv_temp);
        }
        const uint h = fmix32(fmix32(seed) ^ uint(pos));
        const float t = float(h >> 8) * (1.0 / 16777216.0) * z;
        float sum = 0.0;
        choice = m - 1u;
        for (uint i = 0u; i < m; ++i) {
            sum += exp((cand_value[i] - l0) * inv_temp);
            if (t < sum) {
                choice = i;
                break;
            }
        }
    }
    o[v] = int(cand_id[choice]);
}
