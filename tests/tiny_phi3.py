"""A tiny random Phi-3 GGUF for the decoder's tests: `write_phi3(path)`.

tests/tiny_llama.py's model (two layers, 64 wide) in the layout llama.cpp
reads for Phi-3: Q, K and V one matrix, blk.N.attn_qkv (Q's rows, then K's,
then V's; `fused_qkv=False`: three matrices, as llama.cpp also reads them),
the FFN's gate and up one matrix, blk.N.ffn_up (the gate's rows first; no
ffn_gate), and LongRoPE's factors, rope_factors_long and _short (about
FACTORS: far from 1, so that taking the wrong ones shows), the cos and sin
scaled by ATTN_FACTOR ({arch}.rope.scaling.attn_factor). The context is
CONTEXT positions, the original one ORIGINAL (the short factors, at any
context a test takes); `long=True` makes the original LONG_ORIGINAL, below
every context (the long factors). tests/spm_vocab.py's trained
SentencePiece vocabulary, less its byte tokens past ASCII (Phi-3's is a
SentencePiece one too). RoPE in ggml's neox mode (llama.cpp's choice for
Phi-3: nothing in the file says so).
"""
from __future__ import annotations

from pathlib import Path

import spm_vocab
from tiny_llama import TINY, write_gguf

FACTORS = {"rope_factors_long": 4.0, "rope_factors_short": 2.0}
ATTN_FACTOR = 1.19
CONTEXT, ORIGINAL, LONG_ORIGINAL = 4096, 4096, 128


def write_phi3(path: Path, scale: float = 1.0, fused_qkv: bool = True, long: bool = False, **kw) -> Path:
    """The tiny Phi-3 at path (see the module's note); kw as tiny_llama.write_gguf's."""
    t = TINY
    hd = t["n_embd"] // t["n_head"]
    q_rows, kv_rows = t["n_head"] * hd, t["n_head_kv"] * hd
    drop, reshape, extra = [], {}, {"rope_factors_long.weight": (hd // 2,), "rope_factors_short.weight": (hd // 2,)}
    for i in range(t["n_layer"]):
        drop.append(f"blk.{i}.ffn_gate.weight")
        reshape[f"blk.{i}.ffn_up.weight"] = (2 * t["n_ff"], t["n_embd"])
        if fused_qkv:
            drop += [f"blk.{i}.attn_{r}.weight" for r in "qkv"]
            extra[f"blk.{i}.attn_qkv.weight"] = (q_rows + 2 * kv_rows, t["n_embd"])
    metadata = {"phi3.context_length": CONTEXT, "phi3.rope.scaling.attn_factor": ATTN_FACTOR,
                "phi3.rope.scaling.original_context_length": LONG_ORIGINAL if long else ORIGINAL}
    vocab = spm_vocab.whole_characters(spm_vocab.gguf_tokenizer(spm_vocab.train()))
    return write_gguf(path, "phi3", drop=tuple(drop) + kw.pop("drop", ()), reshape=reshape | kw.pop("reshape", {}),
                      extra=extra | kw.pop("extra", {}), metadata=metadata | kw.pop("metadata", {}), scale=scale,
                      tokenizer=vocab, vector_scale=FACTORS, **kw)
