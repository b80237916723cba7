"""The vector ops of a llama decode step on the device: one compute shader
each, one module each (common: what they share; launches: a GPU class's
launches on any device).

Each op binds the vkq.Tensor objects it is given once, at construction,
and `record(seq)` appends its dispatch to a Kompute sequence; `reads` and
`writes` name the tensors it touches, so that a vkq.Graph (`g.add(op)`) puts
barriers only where one op reads what another wrote. `Vectors` says where a
run of vectors sits inside a tensor (an offset, for one part of a stacked
mat-vec's output, and a stride).

- EmbedRows: rows of a quantized matrix (the token embedding) by id, decoded
  by the mat-vec's own block decoders from the same device layout.
- RMSNorm: with weight; optionally adds a residual first (x += r, kept), the
  way a llama layer's residual adds run: fused into the norm after them.
- Attention: RoPE of the new query and key, the new key and value appended
  to the float32 KV cache at the position in a device int32 tensor, and
  grouped-query attention over the cache, causal (a sliding window, soft-capped
  scores where the architecture says): one dispatch per layer.
- SwiGLU: silu(gate) * up (GeGLU: gelu(gate) * up).
- HeadNorm: a bias added to a mat-vec's output and/or an RMSNorm of each of
  its heads, in place (Qwen2's Q/K/V biases, Qwen3's Q/K norms).
- ExpertRouting: a mixture-of-experts router's top-k (on the logits) and
  softmax weights
  (the weighted sum of the selected experts' outputs is the residual of the
  RMSNorm after them: WeightedSlots).
- ExpertBias: a mixture of experts' biases, each slot its expert's row (gpt-oss).
- SoftCap: c * tanh(x / c) in place (Gemma 2's final logits).
- Argmax: greedy sampling, numpy's argmax order.

The vector ops take n vectors (a decode step's one, or a chunk of a
prompt's tokens).

RMSNorm, SwiGLU and Attention can also write their output as the int8
mat-vec path's Q8_1 blocks (`xq`, a Q8_1Output): the mat-vecs that read it
next then need no quantize dispatch of their own (vkq.Graph takes the op's
`quantized` in place of one), which on a GPU saves a dispatch and a barrier
per mat-vec stage.

Every op keeps its dispatches' `launches` (Launch: workgroups, invocations,
and serial depth, counted from the shader's loops by a function beside the
op), which `vkq generate --shape` prints per op; recorded on LaunchesOf(device,
a GPU class's caps), the ops take that class's launches on any device.
"""
from __future__ import annotations

from .common import REDUCE_WG, Q8_1Output, Vectors, _Op, reducing_variant, spreads  # noqa: F401
from .launches import GPU_LAUNCH_CAPS, LaunchCaps, LaunchesOf, launches_of  # noqa: F401
from .embed_rows import ROWS_WG, EmbedRows, embed_rows_depth  # noqa: F401
from .rms_norm import (RMS_NORM_GPU_WG, RMSNorm, WeightedSlots, rms_norm_depth, rms_norm_launch,  # noqa: F401
                       rms_norm_workgroups)
from .attention import (ATTENTION_GPU_DEPTH, ATTENTION_WORKGROUPS_PER_UNIT, GPU_COMPUTE_UNITS,  # noqa: F401
                        MAX_ATTENTION_HEADS, MAX_HEAD_DIM, MAX_KV_CAPACITY, MIN_ATTENTION_SPLIT, Attention,
                        AttentionLaunch, AttentionShape,
                        attention_depth, attention_fold_rounds, attention_folds, attention_heads, attention_launch,
                        attention_loop_iterations, attention_scratch_size, attention_shared_bytes, attention_split,
                        check_attention_vectors, rope_table)
from .swiglu import SWIGLU_WG, SwiGLU, swiglu_depth  # noqa: F401
from .head_norm import HeadNorm, head_norm_depth  # noqa: F401
from .expert_routing import ExpertRouting, expert_routing_depth  # noqa: F401
from .expert_bias import EXPERT_BIAS_WG, ExpertBias, expert_bias_depth  # noqa: F401
from .soft_cap import SOFT_CAP_WG, SoftCap, soft_cap_depth  # noqa: F401
from .argmax import ARGMAX_SPAN, ARGMAX_WG, Argmax, argmax_depth, argmax_parts  # noqa: F401
