"""A llama GGUF file with a preset's shapes and random weights, to race whole models.

`write_random_llama("llama-3.1-8b:Q4_0", path, tokenizer_from=smol)` writes
a file that `vkq generate` and llama.cpp both run: the published shapes of a
`vkq bench` preset (vkq.presets; its matrices typed as llama.cpp's quantizer
types that mix), random valid blocks (vkq.synthetic), and the tokenizer and
vocabulary of another llama file (the vocabulary sizes the token embedding
and output head). Tensors are written one at a time, as they are made, so an
8B file costs seconds and no more memory than its largest tensor. The text
it generates is noise: it measures speed, not language.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np

from .formats import get_format
from .presets import OUTPUT, PRESETS, mix_type
from .synthetic import random_weights

# Hyper-parameters llama.cpp needs that the presets do not carry (Llama 3's).
ROPE_BASE = 500000.0
RMS_EPS = 1e-5
CONTEXT = 8192


def _tokenizer_fields(path: Path):
    reader = gguf.GGUFReader(str(path))
    fields = [f for f in reader.fields.values() if f.name.startswith("tokenizer.")]
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{path.name} has no tokenizer (tokenizer.ggml.tokens)")
    return fields, len(tokens.data)


def write_random_llama(preset: str, path: str | Path, tokenizer_from: str | Path, seed: int = 0) -> Path:
    """preset: "NAME:MIX" of a dense llama preset (vkq bench --list). Returns path."""
    name, _, mix = preset.partition(":")
    spec = PRESETS.get(name.lower())
    if spec is None or spec.arch != "llama" or spec.is_moe or spec.test_only:
        llamas = ", ".join(n for n, s in PRESETS.items() if s.arch == "llama" and not s.is_moe and not s.test_only)
        raise ValueError(f"{preset!r}: a random llama file comes from a dense llama preset ({llamas})")
    mix = mix.upper() or "Q4_0"
    if mix not in spec.mixes:
        raise ValueError(f"{spec.name} has no {mix!r} mix; it offers {', '.join(spec.mixes)}")
    fields, n_vocab = _tokenizer_fields(Path(tokenizer_from))
    spec = replace(spec, vocab=n_vocab)
    matrices = spec.matrices(mix)
    embd = next((m for m in matrices if m.name == "token_embd.weight"), None)
    if embd is None:  # untied: the embedding in the mix's output type, as an extra tensor
        embd_type = mix_type(mix, OUTPUT, spec.n_layer, spec.n_layer, spec)
        matrices = [replace(matrices[-1], name="token_embd.weight", qtype=embd_type)] + matrices

    path = Path(path)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(spec.n_layer)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(spec.hidden)
    w.add_feed_forward_length(spec.ffn)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_vocab_size(n_vocab)
    w.add_name(f"random {spec.name} {mix}")
    for f in fields:
        kind = f.types[0]
        w.add_key_value(f.name, f.contents(), kind, sub_type=f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)

    norms = ["output_norm.weight"] + [f"blk.{i}.{v}.weight" for i in range(spec.n_layer)
                                      for v in ("attn_norm", "ffn_norm")]
    for n in norms:
        w.add_tensor_info(n, (spec.hidden,), np.dtype(np.float32), 4 * spec.hidden)
    for m in matrices:
        fmt = get_format(m.qtype)
        byte_shape = (m.shape[-2], fmt.row_bytes(m.shape[-1]))
        w.add_tensor_info(m.name, byte_shape, np.dtype(np.uint8), byte_shape[0] * byte_shape[1],
                          raw_dtype=fmt.ggml_type)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _ in norms:
        w.write_tensor_data(np.ones(spec.hidden, np.float32))
    for m in matrices:
        w.write_tensor_data(random_weights(get_format(m.qtype), m.shape[-2], m.shape[-1], rng))
    w.close()
    return path
