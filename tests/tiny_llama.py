"""A tiny random llama GGUF for the decoder's tests: `write_gguf(path, ...)`.

Two layers, 64 wide, a byte-level BPE vocabulary of 260 tokens; Q8_0
matrices except attn_v (Q4_0, so Q/K/V form two upload groups), an untied
output head, F32 norms. With `experts=(n_expert, n_used)` the FFN of every
layer is a mixture of experts in Mixtral's layout (an F32 router and Q8_0
expert stacks, except ffn_up_exps in Q4_0: gate and up then form two
MUL_MAT_ID groups unless `expert_types` says otherwise).
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from conftest import finish_gguf

TINY = dict(n_layer=2, n_embd=64, n_ff=128, n_head=4, n_head_kv=2)


def byte_level_vocab() -> tuple[list[str], list[str], list[int]]:
    """tokens, merges, token types of a small byte-level BPE: <|endoftext|>,
    the 256 byte symbols and three merges."""
    from tokenizers import pre_tokenizers

    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = ["<|endoftext|>"] + sorted(pre_tokenizers.ByteLevel.alphabet()) + ["Ġt", "he", "Ġthe"]
    return tokens, merges, [3] + [1] * (len(tokens) - 1)


def write_gguf(path: Path, arch: str = "llama", drop: tuple[str, ...] = (), reshape: dict | None = None,
               metadata: dict | None = None, experts: tuple[int, int] | None = None,
               expert_types: dict[str, str] | None = None, extra: dict | None = None,
               nan_scales: str | None = None, tokenizer: dict | None = None, scale: float = 1.0,
               n_layer: int | None = None, embed_std: float = 1.0, vector_scale: dict | None = None,
               times: dict[str, float] | None = None) -> Path:
    """The tiny model (see the module's note) at path. drop: tensors left out;
    reshape: name -> another shape; extra: name -> shape of tensors to add.
    metadata: keys to add or to replace (the hyper-parameters too): a str, a
    float (float32), an int (uint32), or (value, gguf.GGUFValueType).
    experts: (expert_count, expert_used_count); expert_types: stack role
    (ffn_gate_exps, ...) -> block type. nan_scales: a matrix whose blocks'
    fp16 scales are NaN (it decodes to NaN). tokenizer: tokenizer.ggml.* metadata
    in place of the byte-level BPE's (spm_vocab.gguf_tokenizer's); its tokens
    give the vocabulary size. scale: multiplies every matrix but the token
    embedding (larger: logits less flat). 1-D tensors are norm weights
    near 1, except biases (*.bias, F32 whatever their shape): N(0, 1). n_layer: layers in place of TINY's;
    embed_std: the token embedding's standard deviation; vector_scale: role
    (post_ffw_norm, ...) -> a factor of its 1-D tensors."""
    rng = np.random.default_rng(0)
    t = TINY | ({"n_layer": n_layer} if n_layer else {})
    tokens, merges, types = byte_level_vocab()
    w = gguf.GGUFWriter(str(path), arch)
    hyper = {"block_count": t["n_layer"], "context_length": 256, "embedding_length": t["n_embd"],
             "feed_forward_length": t["n_ff"], "attention.head_count": t["n_head"],
             "attention.head_count_kv": t["n_head_kv"], "rope.freq_base": 10000.0,
             "attention.layer_norm_rms_epsilon": 1e-5}
    if experts:
        hyper.update({"expert_count": experts[0], "expert_used_count": experts[1]})
    V = gguf.GGUFValueType
    if tokenizer is None:
        tokenizer = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
                     "tokenizer.ggml.merges": (merges, V.ARRAY, V.STRING),
                     "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32), "tokenizer.ggml.eos_token_id": 0}
    else:
        tokens = tokenizer["tokenizer.ggml.tokens"][0]
    kinds = {str: V.STRING, float: V.FLOAT32, int: V.UINT32}
    for key, value in ({f"{arch}.{k}": v for k, v in hyper.items()} | tokenizer | (metadata or {})).items():
        w.add_key_value(key, *(value if isinstance(value, tuple) else (value, kinds[type(value)])))

    hd = t["n_embd"] // t["n_head"]
    shapes = {"token_embd.weight": (len(tokens), t["n_embd"]), "output.weight": (len(tokens), t["n_embd"]),
              "output_norm.weight": (t["n_embd"],)}
    for i in range(t["n_layer"]):
        shapes.update({
            f"blk.{i}.attn_norm.weight": (t["n_embd"],), f"blk.{i}.ffn_norm.weight": (t["n_embd"],),
            f"blk.{i}.attn_q.weight": (t["n_head"] * hd, t["n_embd"]),
            f"blk.{i}.attn_k.weight": (t["n_head_kv"] * hd, t["n_embd"]),
            f"blk.{i}.attn_v.weight": (t["n_head_kv"] * hd, t["n_embd"]),
            f"blk.{i}.attn_output.weight": (t["n_embd"], t["n_head"] * hd),
        })
        if experts:
            e = experts[0]
            shapes.update({
                f"blk.{i}.ffn_gate_inp.weight": (e, t["n_embd"]),
                f"blk.{i}.ffn_gate_exps.weight": (e, t["n_ff"], t["n_embd"]),
                f"blk.{i}.ffn_up_exps.weight": (e, t["n_ff"], t["n_embd"]),
                f"blk.{i}.ffn_down_exps.weight": (e, t["n_embd"], t["n_ff"]),
            })
        else:
            shapes.update({
                f"blk.{i}.ffn_gate.weight": (t["n_ff"], t["n_embd"]), f"blk.{i}.ffn_up.weight": (t["n_ff"], t["n_embd"]),
                f"blk.{i}.ffn_down.weight": (t["n_embd"], t["n_ff"]),
            })
    shapes.update(reshape or {})
    shapes.update(extra or {})
    types = {"ffn_up_exps": "Q4_0", "attn_v": "Q4_0"} | (expert_types or {})
    for name, shape in shapes.items():
        if name in drop:
            continue
        factor = (times or {}).get(name.split(".", 2)[-1] if name.startswith("blk.") else name, 1.0)
        if len(shape) == 1 or name.endswith(".bias"):  # (a mixture of experts' biases: a row per expert)
            values = rng.standard_normal(shape) if name.endswith(".bias") else 1 + 0.1 * rng.standard_normal(shape)
            values = values * (vector_scale or {}).get(name.split(".")[-2], 1.0)
            w.add_tensor(name, factor * values.astype(np.float32))
            continue
        std = embed_std if name == "token_embd.weight" else scale / np.sqrt(shape[-1])
        values = factor * (std * rng.standard_normal(shape)).astype(np.float32)
        if "ffn_gate_inp" in name:  # routers are F32, as llama.cpp keeps them
            w.add_tensor(name, values)
            continue
        role = name.split(".")[-2]
        qtype = gguf.GGMLQuantizationType[types.get(role, "Q8_0")]
        data = gguf.quants.quantize(values, qtype)
        if name == nan_scales:  # Q4_0's and Q8_0's blocks start with their fp16 scale
            data.reshape(-1, gguf.GGML_QUANT_SIZES[qtype][1])[:, :2] = np.float16(np.nan).reshape(1).view(np.uint8)
        w.add_tensor(name, data, raw_dtype=qtype)
    return finish_gguf(w, path)
