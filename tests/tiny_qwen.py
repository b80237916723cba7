"""Tiny random Qwen2 and Qwen3 GGUFs for the decoder's tests: `write_qwen(path, arch)`.

tests/tiny_llama.py's model (two layers, 64 wide) in the layout llama.cpp
reads for each architecture, with a byte-level BPE vocabulary of the ASCII
bytes only and Qwen's pre-tokenizer ("qwen2"): every token is whole UTF-8,
as llama-server's /completion needs of the text it generates (it answers
500 where the text ends inside a character, and a random model's greedy
tokens would be any bytes):

- qwen2: Q, K and V biases (blk.N.attn_{q,k,v}.bias), seeded N(0, 1);
- qwen3: per-head RMSNorm weights of Q and K (blk.N.attn_{q,k}_norm.weight),
  heads of HEAD_DIM values, wider than n_embd / n_head (key_length and
  value_length in the metadata), so Q is 256 rows of a 64-wide model (and
  attn_output's rows whole 256-value blocks: Q4_K in llama.cpp's Q4_K_M);
- qwen3moe: qwen3's attention, and in every layer a mixture of EXPERTS
  (tiny_llama's Mixtral layout: an F32 router, Q8_0 stacks, ffn_up_exps
  Q4_0) of their own width EXPERT_FF (expert_feed_forward_length).

Both take RoPE in ggml's neox mode (llama.cpp's choice for these
architectures: nothing in the file says so). `scale` multiplies every matrix
but the token embedding: random weights give flat logits, and larger ones
give the greedy tokens margins that float32 roundings do not flip.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tiny_llama import TINY, write_gguf

HEAD_DIM = {"qwen2": TINY["n_embd"] // TINY["n_head"], "qwen3": 64, "qwen3moe": 64}
EXPERTS = (16, 4)  # qwen3moe's experts per layer and per token (Qwen3-30B-A3B: 128, 8)
EXPERT_FF = 32  # qwen3moe's expert width (expert_feed_forward_length), not the 128 of feed_forward_length
MERGES = ["Ġ t", "h e", "Ġt he", "1 2"]


def ascii_vocab() -> dict:
    """tokenizer.ggml.* metadata: <|endoftext|>, the 128 ASCII bytes as
    byte-level BPE writes them (GPT-2's byte-to-symbol table), MERGES."""
    import gguf

    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    symbol, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in symbol:
            symbol[b], extra = chr(256 + extra), extra + 1
    tokens = ["<|endoftext|>"] + [symbol[b] for b in range(128)] + [m.replace(" ", "") for m in MERGES]
    V = gguf.GGUFValueType
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
            "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING), "tokenizer.ggml.merges": (MERGES, V.ARRAY, V.STRING),
            "tokenizer.ggml.token_type": ([3] + [1] * (len(tokens) - 1), V.ARRAY, V.INT32),
            "tokenizer.ggml.eos_token_id": 0}


def write_qwen(path: Path, arch: str, scale: float = 1.0, **kw) -> Path:
    """The tiny model of `arch` ("qwen2" or "qwen3") at path; kw as tiny_llama.write_gguf's."""
    t, hd = TINY, HEAD_DIM[arch]
    q_rows, kv_rows = t["n_head"] * hd, t["n_head_kv"] * hd
    reshape, extra = {}, {}
    metadata = {f"{arch}.attention.key_length": hd,
                f"{arch}.attention.value_length": hd}
    for i in range(t["n_layer"]):
        reshape.update({f"blk.{i}.attn_q.weight": (q_rows, t["n_embd"]),
                        f"blk.{i}.attn_k.weight": (kv_rows, t["n_embd"]),
                        f"blk.{i}.attn_v.weight": (kv_rows, t["n_embd"]),
                        f"blk.{i}.attn_output.weight": (t["n_embd"], q_rows)})
        if arch == "qwen2":
            extra.update({f"blk.{i}.attn_q.bias": (q_rows,), f"blk.{i}.attn_k.bias": (kv_rows,),
                          f"blk.{i}.attn_v.bias": (kv_rows,)})
        else:
            extra.update({f"blk.{i}.attn_q_norm.weight": (hd,), f"blk.{i}.attn_k_norm.weight": (hd,)})
        if arch == "qwen3moe":
            e, f = EXPERTS[0], EXPERT_FF
            reshape.update({f"blk.{i}.ffn_gate_exps.weight": (e, f, t["n_embd"]),
                            f"blk.{i}.ffn_up_exps.weight": (e, f, t["n_embd"]),
                            f"blk.{i}.ffn_down_exps.weight": (e, t["n_embd"], f)})
    if arch == "qwen3moe":
        metadata[f"{arch}.expert_feed_forward_length"] = EXPERT_FF
        kw.setdefault("experts", EXPERTS)
    return write_gguf(path, arch, reshape=reshape | kw.pop("reshape", {}), extra=extra | kw.pop("extra", {}),
                      metadata=metadata | kw.pop("metadata", {}), scale=scale, tokenizer=ascii_vocab(), **kw)
