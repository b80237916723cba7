// Four floats of a storage buffer at a time. A shader declares the buffer
// twice at one binding, as float[] and as vec4[], and
//   FLOAT4_READER(name, floats, quads): vec4 name(uint base, uint i, uint n, bool aligned)
//     the values base + i .. base + i + 3 of a vector of n values that
//     starts at element base (i a multiple of 4), 0 past its end;
//   FLOAT4_WRITER(name, floats, quads): void name(uint base, uint i, uint n, bool aligned, vec4 v)
//     stores them (those before the end);
// one vec4 access where `aligned` (base a multiple of 4 and n too, which the
// caller knows from its offsets and strides), else one per value. A CPU
// driver's cost is per access, not per byte: a quarter of them. (The
// functions' own names end in _, so that none hides a buffer's.)
#ifndef FLOAT4_GLSL
#define FLOAT4_GLSL

#define FLOAT4_READER(name, floats, quads)                            \
    vec4 name(uint base_, uint i_, uint n_, bool aligned_) {          \
        if (aligned_) {                                               \
            return quads[(base_ + i_) / 4u];                          \
        }                                                             \
        vec4 read4_ = vec4(0.0);                                      \
        for (uint c_ = 0u; c_ < 4u && i_ + c_ < n_; c_++) {           \
            read4_[c_] = floats[base_ + i_ + c_];                     \
        }                                                             \
        return read4_;                                                \
    }

#define FLOAT4_WRITER(name, floats, quads)                            \
    void name(uint base_, uint i_, uint n_, bool aligned_, vec4 v_) { \
        if (aligned_) {                                               \
            quads[(base_ + i_) / 4u] = v_;                            \
            return;                                                   \
        }                                                             \
        for (uint c_ = 0u; c_ < 4u && i_ + c_ < n_; c_++) {           \
            floats[base_ + i_ + c_] = v_[c_];                         \
        }                                                             \
    }

#endif
