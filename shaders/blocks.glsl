// Picks the block decoder for the type this variant is compiled for.
#if defined(TYPE_F32)
#include "blocks/f32.glsl"
#elif defined(TYPE_F16)
#include "blocks/f16.glsl"
#elif defined(TYPE_BF16)
#include "blocks/bf16.glsl"
#elif defined(TYPE_Q4_0)
#include "blocks/q4_0.glsl"
#elif defined(TYPE_Q4_1)
#include "blocks/q4_1.glsl"
#elif defined(TYPE_Q5_0)
#include "blocks/q5_0.glsl"
#elif defined(TYPE_Q5_1)
#include "blocks/q5_1.glsl"
#elif defined(TYPE_Q8_0)
#include "blocks/q8_0.glsl"
#elif defined(TYPE_Q2_K)
#include "blocks/q2_k.glsl"
#elif defined(TYPE_Q3_K)
#include "blocks/q3_k.glsl"
#elif defined(TYPE_Q4_K)
#include "blocks/q4_k.glsl"
#elif defined(TYPE_Q5_K)
#include "blocks/q5_k.glsl"
#elif defined(TYPE_Q6_K)
#include "blocks/q6_k.glsl"
#elif defined(TYPE_MXFP4)
#include "blocks/mxfp4.glsl"
#elif defined(TYPE_IQ4_NL)
#include "blocks/iq4_nl.glsl"
#elif defined(TYPE_IQ4_XS)
#include "blocks/iq4_xs.glsl"
#else
#error "no TYPE_<name> defined"
#endif
