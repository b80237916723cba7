"""The GGUF architectures vkq generate runs, one row each: what sets their
decoders apart from llama's (general.architecture names the row).

Every row is llama's decoder (RMSNorm, grouped-query attention with RoPE,
SwiGLU FFN, tied or untied output head) with these differences, as
llama.cpp builds each graph (src/models/<arch>.cpp, and llama_model_rope_type
for the RoPE mode):

- rope: "norm", ggml's normal mode, adjacent pairs (x[2i], x[2i+1]) rotate
  (llama's converter permutes Q and K for it); "neox", pairs (x[i],
  x[i + n_rot/2]) (Qwen's Q and K are stored as trained);
- biases: the matrices of a layer whose output gets a bias vector added
  (blk.N.<role>.bias, one value per row): Qwen2's Q, K and V;
- head_norms: the matrices whose output is RMS-normed head by head, before
  RoPE, with the weight blk.N.<role>_norm.weight (head_dim values, shared by
  the heads): Qwen3's Q and K;
- experts: whether the FFN is a mixture of experts in Mixtral's layout
  (router ffn_gate_inp, stacks ffn_{gate,up,down}_exps; softmax over every
  router logit, the top expert_used_count, their weights renormalized):
  "none", "optional" (llama: where expert_count says so) or "always"
  (qwen3moe: every layer);
- expert_width: the experts' FFN width is expert_feed_forward_length (by
  default feed_forward_length / expert_used_count), not
  feed_forward_length (qwen3moe's 768 beside its 6144);
- glu: the FFN's gate activation, "silu" (SwiGLU), "gelu" (GeGLU: ggml's
  GELU, the tanh approximation, of the gate times up) or "oai" (gpt-oss's
  clamped SwiGLU: min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1));
- embed_scale: the token embedding's rows are multiplied by sqrt(n_embd)
  (Gemma);
- post_norms: the attention's and the FFN's outputs are RMS-normed (weights
  blk.N.post_attention_norm, blk.N.post_ffw_norm) before they join the residual
  stream (Gemma 2 and 3);
- softcap: attention scores and the final logits are soft-capped, c *
  tanh(x / c), with {arch}.attn_logit_softcapping (default 50) and
  {arch}.final_logit_softcapping (default 30) (Gemma 2);
- swa_pattern: sliding-window attention on every layer but each
  swa_pattern-th (layer il slides where il % swa_pattern < swa_pattern - 1:
  Gemma 2's even layers, Gemma 3's five of six), over {arch}.attention.
  sliding_window positions (default: swa_default; None: the key is
  required): a query at position p sees the keys at p - window + 1 .. p;
- swa_rope_base: the sliding layers' RoPE base, unscaled (Gemma 3's
  10000; None: the file's base and scaling, as the other layers');
- wide_query_layers: the block count of the model llama.cpp scales
  queries by 1 / sqrt(n_embd / n_head) instead of 1 / sqrt(head_dim)
  (Gemma's 27B, whose query_pre_attn_scalar is n_embd / n_head; llama.cpp
  tells it by its layers, GGUF files do not carry the scalar);
- fused_qkv: a layer's Q, K and V may be one matrix, blk.N.attn_qkv (Q's
  rows, then K's, then V's), split into the three on loading (Phi-3);
- fused_gate_up: the FFN's gate and up are one matrix, blk.N.ffn_up (the
  gate's rows, then up's; no ffn_gate), split on loading (Phi-3);
- rope_factors: the RoPE frequencies are divided by rope_factors_long or
  rope_factors_short (one value per pair), long where the context is longer
  than {arch}.rope.scaling.original_context_length (by default the
  training context), as llama.cpp chooses them (Phi-3's LongRoPE);
- ffn_norm: the name of the norm before the FFN (gpt-oss calls it
  post_attention_norm);
- sinks: each head's attention has a sink, blk.N.attn_sinks (a logit per
  query head that joins the softmax's denominator only) (gpt-oss);
- expert_biases: the router and each expert's gate, up and down have biases
  (blk.N.ffn_gate_inp.bias, blk.N.ffn_{gate,up,down}_exps.bias: a row per
  expert) (gpt-oss);
- yarn: YaRN RoPE scaling where the file says so ({arch}.rope.scaling.type
  yarn), as ggml's rope computes it (gpt-oss);
- tied_output: the output head is always the token embedding
  (llama.cpp reads no output.weight of a Gemma 2 file, and refuses a file
  that holds one: so does vkq).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    name: str
    rope: str  # "norm" or "neox"
    biases: tuple[str, ...] = ()
    head_norms: tuple[str, ...] = ()
    experts: str = "none"
    expert_width: bool = False
    glu: str = "silu"
    embed_scale: bool = False
    post_norms: bool = False
    softcap: bool = False
    swa_pattern: int = 0
    swa_default: int | None = None
    swa_rope_base: float | None = None
    wide_query_layers: int | None = None
    tied_output: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    rope_factors: bool = False
    ffn_norm: str = "ffn_norm"
    sinks: bool = False
    expert_biases: bool = False
    yarn: bool = False

    @property
    def neox(self) -> bool:
        return self.rope == "neox"

    @staticmethod
    def bias_tensor(layer: int, role: str) -> str:
        """The name of the bias of matrix `role` (attn_q, ...) of a layer."""
        return f"blk.{layer}.{role}.bias"

    @staticmethod
    def head_norm_tensor(layer: int, role: str) -> str:
        """The name of the per-head norm weight of matrix `role`'s output."""
        return f"blk.{layer}.{role}_norm.weight"

    @property
    def layer_vectors(self) -> tuple[str, ...]:
        """The norm weights of each layer (blk.N.<name>.weight)."""
        return ("attn_norm", self.ffn_norm) + (("post_attention_norm", "post_ffw_norm") if self.post_norms else ())

    def slides(self, layer: int) -> bool:
        """Whether a layer's attention is a sliding window's (swa_pattern)."""
        return self.swa_pattern > 0 and layer % self.swa_pattern < self.swa_pattern - 1


ARCHITECTURES = {a.name: a for a in (
    Architecture("llama", "norm", experts="optional"),
    Architecture("qwen2", "neox", biases=("attn_q", "attn_k", "attn_v")),
    Architecture("qwen3", "neox", head_norms=("attn_q", "attn_k")),
    Architecture("qwen3moe", "neox", head_norms=("attn_q", "attn_k"), experts="always", expert_width=True),
    Architecture("gemma2", "neox", glu="gelu", embed_scale=True, post_norms=True, softcap=True, swa_pattern=2,
                 swa_default=4096, wide_query_layers=46, tied_output=True),
    Architecture("gemma3", "neox", head_norms=("attn_q", "attn_k"), glu="gelu", embed_scale=True, post_norms=True,
                 swa_pattern=6, swa_rope_base=10000.0, wide_query_layers=62),
    Architecture("phi3", "neox", fused_qkv=True, fused_gate_up=True, rope_factors=True),
    Architecture("gpt-oss", "neox", biases=("attn_q", "attn_k", "attn_v", "attn_output"), experts="always",
                 expert_width=True, glu="oai", swa_pattern=2, ffn_norm="post_attention_norm", sinks=True,
                 expert_biases=True, yarn=True),
)}
