"""The int8 path's activation formats: how x is quantized before the integer dot products.

name -> int8 planes per 32-value block (shaders/quantize_q8_1.comp):
- "q8_1": ggml's Q8_1, one plane (8 bits per value). The default of a
  Backend, and what ggml's Vulkan backend computes.
- "q8_1x2": Q8_1 plus the Q8_1 of its rounding residual (about 14 bits per
  value) for twice the integer dot products. The default of `vkq generate`:
  one plane's error, amplified over a model's layers, takes the logits up to
  NMSE 3e-2 away from the float reference (SmolLM2, whose activations have
  outliers 90x their RMS); two planes keep them near 1e-7.
"""
ACTIVATION_PLANES = {"q8_1": 1, "q8_1x2": 2}
DEFAULT_ACTIVATIONS = "q8_1"
GENERATE_ACTIVATIONS = "q8_1x2"


def check_activations(name) -> str:
    if name not in ACTIVATION_PLANES:
        raise ValueError(f"unknown activations {name!r}; expected one of {', '.join(ACTIVATION_PLANES)}")
    return name
