// tanh that is finite for any argument but NaN, and soft-capping with it,
// c * tanh(x / c) (Gemma 2's attention scores and logits): one definition
// for every shader that caps or takes GELU. From exp(-2|y|), where the
// builtin may be computed as (e^2y - 1) / (e^2y + 1), inf / inf past y ~ 44.
#ifndef SOFT_CAP_GLSL
#define SOFT_CAP_GLSL

float tanh_finite(float y) {
    const float t = exp(-2.0 * abs(y));
    return sign(y) * ((1.0 - t) / (1.0 + t));
}

float soft_cap(float x, float c) {
    return c * tanh_finite(x / c);
}

#endif
