"""A tiny random gpt-oss GGUF for the decoder's tests: `write_gpt_oss(path)`.

tests/tiny_llama.py's model (two layers, 64 wide) in the layout llama.cpp
reads for gpt-oss: heads of HEAD_DIM values (key_length), biases on Q, K, V
and the attention output, an attention sink per query head
(blk.N.attn_sinks, about SINK: large enough to take a share of the
softmax), the norm before the FFN named post_attention_norm, and in every
layer a mixture of EXPERTS of EXPERT_FF values (expert_feed_forward_length)
with biases on the router and on each expert's gate, up and down (a row per
expert); the even layers a sliding window of WINDOW positions; YaRN RoPE
(YARN: factor 32 over an original context of 4096, base 150000, as
gpt-oss's files hold it); tests/tiny_qwen.py's byte-level BPE of the ASCII
bytes with o200k's pre-tokenizer ("gpt-4o"). RoPE in ggml's neox mode
(llama.cpp's choice for gpt-oss: nothing in the file says so).
"""
from __future__ import annotations

from pathlib import Path

from tiny_llama import TINY, write_gguf
from tiny_qwen import ascii_vocab

HEAD_DIM = 64
EXPERTS = (8, 2)  # experts per layer and per token (gpt-oss-20b: 32, 4)
EXPERT_FF = 64  # whole 32-value blocks: MXFP4's
WINDOW = 5
SINK = 2.0
YARN = {"rope.freq_base": 150000.0, "rope.scaling.type": "yarn", "rope.scaling.factor": 32.0,
        "rope.scaling.original_context_length": 4096, "context_length": 4096}


def write_gpt_oss(path: Path, scale: float = 1.0, **kw) -> Path:
    """The tiny gpt-oss at path (see the module's note); kw as tiny_llama.write_gguf's."""
    t, hd, (e, _), f = TINY, HEAD_DIM, EXPERTS, EXPERT_FF
    q_rows, kv_rows = t["n_head"] * hd, t["n_head_kv"] * hd
    reshape, extra, drop = {}, {}, []
    for i in range(t["n_layer"]):
        n = f"blk.{i}."
        reshape.update({n + "attn_q.weight": (q_rows, t["n_embd"]), n + "attn_k.weight": (kv_rows, t["n_embd"]),
                        n + "attn_v.weight": (kv_rows, t["n_embd"]), n + "attn_output.weight": (t["n_embd"], q_rows),
                        n + "ffn_gate_exps.weight": (e, f, t["n_embd"]), n + "ffn_up_exps.weight": (e, f, t["n_embd"]),
                        n + "ffn_down_exps.weight": (e, t["n_embd"], f)})
        extra.update({n + "attn_q.bias": (q_rows,), n + "attn_k.bias": (kv_rows,), n + "attn_v.bias": (kv_rows,),
                      n + "attn_output.bias": (t["n_embd"],), n + "attn_sinks.weight": (t["n_head"],),
                      n + "post_attention_norm.weight": (t["n_embd"],), n + "ffn_gate_inp.bias": (e,),
                      n + "ffn_gate_exps.bias": (e, f), n + "ffn_up_exps.bias": (e, f),
                      n + "ffn_down_exps.bias": (e, t["n_embd"])})
        drop.append(n + "ffn_norm.weight")
    metadata = {f"gpt-oss.{k}": v for k, v in YARN.items()} | {
        "gpt-oss.attention.key_length": hd, "gpt-oss.attention.value_length": hd, "gpt-oss.rope.dimension_count": hd,
        "gpt-oss.expert_feed_forward_length": f, "gpt-oss.attention.sliding_window": WINDOW}
    vocab = ascii_vocab() | {"tokenizer.ggml.pre": "gpt-4o"}
    kw.setdefault("experts", EXPERTS)
    return write_gguf(path, "gpt-oss", drop=tuple(drop) + kw.pop("drop", ()), reshape=reshape | kw.pop("reshape", {}),
                      extra=extra | kw.pop("extra", {}), metadata=metadata | kw.pop("metadata", {}), scale=scale,
                      tokenizer=vocab, vector_scale={"attn_sinks": SINK}, **kw)
