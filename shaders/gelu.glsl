// GELU, ggml's tanh approximation (GeGLU's gate: Gemma's gelu_pytorch_tanh):
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), the numpy
// reference's (vkq.llama.host.gelu) arithmetic, with a tanh finite for any
// x (soft_cap.glsl): a large gate gives x, not NaN.
#ifndef GELU_GLSL
#define GELU_GLSL

#include "soft_cap.glsl"

float gelu(float x) {
    return 0.5 * x * (1.0 + tanh_finite(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)));
}
vec4 gelu(vec4 x) { return vec4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w)); }

#endif
