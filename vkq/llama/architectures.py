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
  feed_forward_length (qwen3moe's 768 beside its 6144).
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


ARCHITECTURES = {a.name: a for a in (
    Architecture("llama", "norm", experts="optional"),
    Architecture("qwen2", "neox", biases=("attn_q", "attn_k", "attn_v")),
    Architecture("qwen3", "neox", head_norms=("attn_q", "attn_k")),
    Architecture("qwen3moe", "neox", head_norms=("attn_q", "attn_k"), experts="always", expert_width=True),
)}
