"""Tiny random Gemma 2 and Gemma 3 GGUFs for the decoder's tests: `write_gemma(path, arch)`.

tests/tiny_llama.py's model (64 wide) in the layout llama.cpp reads for
each architecture, with heads of HEAD_DIM values (wider than n_embd /
n_head: key_length and value_length in the metadata), the norms after
attention and after the FFN (blk.N.post_attention_norm,
blk.N.post_ffw_norm),
and tests/spm_vocab.py's trained SentencePiece vocabulary as Gemma's is
written (no space prefix, byte fallback), less its byte tokens past ASCII
(every token whole UTF-8, as llama-server needs of the text it returns):

- gemma2: LAYERS["gemma2"] layers, the even ones a sliding window of
  WINDOW positions; attention scores and logits soft-capped at SOFTCAP's,
  low enough that the caps bend them;
- gemma3: per-head RMSNorm weights of Q and K, LAYERS["gemma3"] layers of
  which the sixth alone attends globally, with its own RoPE base and
  linear scaling (GLOBAL_ROPE), the others the window's, RoPE base 10000.

Both tie the output head to the token embedding (llama.cpp reads no
output.weight of a Gemma 2 file, and refuses one that has it), and take
ggml's neox RoPE and GeGLU (llama.cpp's choice for these architectures:
nothing in the file says so). `scale` multiplies every
matrix but the token embedding (larger: greedy margins that float32
roundings do not flip); the embedding's values are small and the norms
after attention and FFN large (VECTOR_SCALE), so that the layers' outputs
outweigh a token's own row in the residual stream: a random tied head
would otherwise give each token's own row the largest logit, and the
model repeat one token.
"""
from __future__ import annotations

from pathlib import Path

import gguf

import spm_vocab
from tiny_llama import TINY, write_gguf

ARCHS = ("gemma2", "gemma3")
HEAD_DIM = 64  # attn_output's rows whole 256-value blocks: Q4_K in llama.cpp's Q4_K_M
LAYERS = {"gemma2": 2, "gemma3": 6}
WINDOW = 5  # {arch}.attention.sliding_window: a 13-token prompt and 10 tokens run well past it
SOFTCAP = {"attn_logit_softcapping": 4.0, "final_logit_softcapping": 12.0}  # gemma2's caps
# The token embedding's spread (its rows scaled by sqrt(n_embd): 0.5), the post-norms' weights (about 3:
# the layers' outputs outweigh the embedding) and the output norm's (about 6: logits with margins)
EMBED_STD = 1 / 16
VECTOR_SCALE = {"post_attention_norm": 3.0, "post_ffw_norm": 3.0, "output_norm": 6.0}
GLOBAL_ROPE = {"rope.freq_base": 1000000.0, "rope.scaling.type": "linear", "rope.scaling.factor": 8.0}  # gemma3's


def gemma_vocab() -> dict:
    """tokenizer.ggml.* metadata: the trained SentencePiece vocabulary as Gemma's files hold it."""
    vocab = spm_vocab.whole_characters(spm_vocab.gguf_tokenizer(spm_vocab.train()))
    return vocab | {"tokenizer.ggml.add_space_prefix": (False, gguf.GGUFValueType.BOOL)}


def write_gemma(path: Path, arch: str, scale: float = 1.0, tied: bool = True, **kw) -> Path:
    """The tiny model of `arch` ("gemma2" or "gemma3") at path (tied: without
    output.weight); kw as tiny_llama.write_gguf's."""
    t, hd, layers = TINY, HEAD_DIM, LAYERS[arch]
    q_rows, kv_rows = t["n_head"] * hd, t["n_head_kv"] * hd
    reshape, extra = {}, {}
    metadata = {f"{arch}.attention.key_length": hd, f"{arch}.attention.value_length": hd,
                f"{arch}.attention.sliding_window": WINDOW}
    if arch == "gemma2":
        metadata.update({f"{arch}.{k}": v for k, v in SOFTCAP.items()})
    else:
        metadata.update({f"{arch}.{k}": v for k, v in GLOBAL_ROPE.items()})
    for i in range(layers):
        reshape.update({f"blk.{i}.attn_q.weight": (q_rows, t["n_embd"]),
                        f"blk.{i}.attn_k.weight": (kv_rows, t["n_embd"]),
                        f"blk.{i}.attn_v.weight": (kv_rows, t["n_embd"]),
                        f"blk.{i}.attn_output.weight": (t["n_embd"], q_rows)})
        extra.update({f"blk.{i}.post_attention_norm.weight": (t["n_embd"],),
                      f"blk.{i}.post_ffw_norm.weight": (t["n_embd"],)})
        if arch == "gemma3":
            extra.update({f"blk.{i}.attn_q_norm.weight": (hd,), f"blk.{i}.attn_k_norm.weight": (hd,)})
    return write_gguf(path, arch, reshape=reshape | kw.pop("reshape", {}), extra=extra | kw.pop("extra", {}),
                      metadata=metadata | kw.pop("metadata", {}), scale=scale, tokenizer=gemma_vocab(),
                      n_layer=layers, embed_std=EMBED_STD, vector_scale=VECTOR_SCALE,
                      drop=kw.pop("drop", ()) + (("output.weight",) if tied else ()), **kw)
