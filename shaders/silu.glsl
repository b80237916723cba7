// silu(x) = x / (1 + exp(-x)), SwiGLU's gate, one definition for the SwiGLU
// op (swiglu.comp) and the SwiGLU fused into a gate|up mat-vec
// (mul_mat_vec.comp's GLU), whose outputs are the same bits because they
// compute it alike.
#ifndef SILU_GLSL
#define SILU_GLSL

float silu(float g) { return g / (1.0 + exp(-g)); }
vec4 silu(vec4 g) { return g / (1.0 + exp(-g)); }

#endif
