"""A GGUF file with a preset's shapes and random weights, to race whole models.

`write_random_model("llama-3.1-8b:Q4_0", path, tokenizer_from=smol)` writes
a file that `vkq generate` and llama.cpp both run: the published shapes of a
`vkq bench` preset (vkq.commands.presets; its matrices typed as llama.cpp's quantizer
types that mix), random valid blocks (vkq.blocks.synthetic), and the tokenizer and
vocabulary of another GGUF file (the vocabulary sizes the token embedding
and output head). A preset of the llama, qwen2, qwen3 or qwen3moe
architecture is laid out as llama.cpp's converter lays that architecture
out: what vkq.llama.architectures says it adds to llama's layer (Qwen2's
Q, K and V biases, Qwen3's per-head Q and K norms, Qwen3-MoE's experts of
their own width) and its RoPE base and RMSNorm epsilon. `experts=(n, k)`
makes every FFN of a llama preset a mixture of n experts of the preset's
FFN size, k used (Mixtral's layout). Tensors are written one at a time, as
they are made, so an 8B file costs seconds and no more memory than its
largest tensor. The text it generates is noise: it measures speed, not
language, so any architecture may take any tokenizer (SmolLM2's for all of
them: the vocabulary's size moves only the embedding and the output head).
`write_tokenizer` keeps a file's tokenizer alone (a few MB, to take where
the model file does not go).

    python -m vkq.commands.model_file llama-3.1-8b:Q4_0 OUT.gguf --tokenizer FILE.gguf [--experts 8,2]
    python -m vkq.commands.model_file qwen3-0.6b:Q4_0 OUT.gguf --tokenizer FILE.gguf
    python -m vkq.commands.model_file --tokenizer-only FILE.gguf OUT.gguf
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np

from ..blocks.formats import get_format
from ..blocks.synthetic import random_weights
from ..llama.architectures import ARCHITECTURES
from .presets import OUTPUT, PRESETS, ModelSpec, mix_type

# Hyper-parameters llama.cpp needs that the presets do not carry, per
# architecture: (RoPE base, RMSNorm epsilon), Llama 3's and Qwen2.5's/Qwen3's
# (rope_theta and rms_norm_eps of their config.json).
HYPER = {"llama": (500000.0, 1e-5), "qwen2": (1e6, 1e-6), "qwen3": (1e6, 1e-6), "qwen3moe": (1e6, 1e-6)}
CONTEXT = 8192


def _tokenizer_fields(path: Path):
    reader = gguf.GGUFReader(str(path))
    fields = [f for f in reader.fields.values() if f.name.startswith("tokenizer.")]
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ValueError(f"{path.name} has no tokenizer (tokenizer.ggml.tokens)")
    return fields, len(tokens.data)


def add_hyperparameters(w: gguf.GGUFWriter, spec, context: int, rms_eps: float) -> None:
    """A preset's (vkq.commands.presets.ModelSpec) hyper-parameters, as llama.cpp reads them."""
    w.add_block_count(spec.n_layer)
    w.add_context_length(context)
    w.add_embedding_length(spec.hidden)
    # A model of experts only (ffn 0) gives the experts' total width, as Qwen3-MoE's config does.
    w.add_feed_forward_length(spec.ffn or spec.expert_ffn * spec.n_expert_used)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_vocab_size(spec.vocab)
    if spec.is_moe:
        w.add_expert_count(spec.n_expert)
        w.add_expert_used_count(spec.n_expert_used)
        w.add_expert_feed_forward_length(spec.expert_ffn)


def _writable(spec: ModelSpec) -> bool:
    return spec.arch in HYPER and not spec.test_only


def write_random_model(preset: str, path: str | Path, tokenizer_from: str | Path, seed: int = 0,
                       experts: tuple[int, int] | None = None) -> Path:
    """preset: "NAME:MIX" of a llama, qwen2, qwen3 or qwen3moe preset (vkq bench --list);
    experts: (n_expert, n_used) to make a dense llama preset's FFNs mixtures of experts. Returns path."""
    name, _, mix = preset.partition(":")
    spec = PRESETS.get(name.lower())
    if spec is None or not _writable(spec):
        names = ", ".join(n for n, s in PRESETS.items() if _writable(s))
        raise ValueError(f"{preset!r}: a random model file comes from one of the presets {names}")
    mix = mix.upper() or "Q4_0"
    if mix not in spec.mixes:
        raise ValueError(f"{spec.name} has no {mix!r} mix; it offers {', '.join(spec.mixes)}")
    if experts is not None:
        if ARCHITECTURES[spec.arch].experts != "optional" or spec.is_moe:
            raise ValueError(f"--experts: {spec.name} is a {spec.arch} model; experts go into a dense llama preset")
        n_expert, n_used = experts
        if not 1 <= n_used <= n_expert:
            raise ValueError(f"experts {experts}: n_used must be 1 to n_expert")
        spec = replace(spec, n_expert=n_expert, n_expert_used=n_used, expert_ffn=spec.ffn)
    return write_model(spec, mix, path, tokenizer_from, seed)


def write_model(spec: ModelSpec, mix: str, path: str | Path, tokenizer_from: str | Path, seed: int = 0,
                context: int = CONTEXT) -> Path:
    """The file of a ModelSpec (any shape, e.g. a test's) in one of its mixes,
    with tokenizer_from's tokenizer and vocabulary, its context length
    `context`. Returns path."""
    arch = ARCHITECTURES[spec.arch]
    rope_base, rms_eps = HYPER[spec.arch]
    fields, n_vocab = _tokenizer_fields(Path(tokenizer_from))
    spec = replace(spec, vocab=n_vocab)
    matrices = spec.matrices(mix)
    embd = next((m for m in matrices if m.name == "token_embd.weight"), None)
    if embd is None:  # untied: the embedding in the mix's output type, as an extra tensor
        embd_type = mix_type(mix, OUTPUT, spec.n_layer, spec.n_layer, spec)
        matrices = [replace(matrices[-1], name="token_embd.weight", qtype=embd_type)] + matrices

    path = Path(path)
    w = gguf.GGUFWriter(str(path), spec.arch)
    add_hyperparameters(w, spec, context, rms_eps)
    w.add_rope_freq_base(rope_base)
    w.add_name(f"random {spec.name} {mix}" + (f", {spec.n_expert} experts" if spec.is_moe else ""))
    for f in fields:
        kind = f.types[0]
        w.add_key_value(f.name, f.contents(), kind, sub_type=f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)

    # The F32 vectors: RMSNorm weights (ones) and the architecture's additions:
    # the biases of its matrices' rows (small random values: a bias the
    # decoder skipped would show) and its per-head norm weights (ones).
    rows = {m.role: m.shape[-2] for m in matrices if m.layer == 0}
    vectors = [("output_norm.weight", spec.hidden, False)]
    for i in range(spec.n_layer):
        vectors += [(f"blk.{i}.{v}.weight", spec.hidden, False) for v in ("attn_norm", "ffn_norm")]
        vectors += [(arch.bias_tensor(i, role), rows[role], True) for role in arch.biases]
        vectors += [(arch.head_norm_tensor(i, role), spec.head_dim, False) for role in arch.head_norms]
    for name, n, _ in vectors:
        w.add_tensor_info(name, (n,), np.dtype(np.float32), 4 * n)
    for m in matrices:
        fmt = get_format(m.qtype)
        byte_shape = m.shape[:-1] + (fmt.row_bytes(m.shape[-1]),)
        w.add_tensor_info(m.name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=fmt.ggml_type)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _, n, is_bias in vectors:
        w.write_tensor_data(rng.normal(0, 0.1, n).astype(np.float32) if is_bias else np.ones(n, np.float32))
    for m in matrices:
        n_expert = m.shape[0] if m.is_expert_stack else 1
        w.write_tensor_data(random_weights(get_format(m.qtype), m.shape[-2], m.shape[-1], rng, n_expert))
    w.close()
    return path


def write_tokenizer(src: str | Path, path: str | Path) -> Path:
    """A GGUF file holding src's tokenizer metadata alone (general.architecture
    "tokenizer", no tensors): a tokenizer_from for write_random_model."""
    fields, _ = _tokenizer_fields(Path(src))
    w = gguf.GGUFWriter(str(path), "tokenizer")
    for f in fields:
        kind = f.types[0]
        w.add_key_value(f.name, f.contents(), kind, sub_type=f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def build_parser():
    import argparse

    p = argparse.ArgumentParser(prog="python -m vkq.commands.model_file", description=__doc__.splitlines()[0])
    p.add_argument("model", help="a llama, qwen2, qwen3 or qwen3moe preset NAME:MIX (vkq bench --list), or with "
                                 "--tokenizer-only the GGUF file whose tokenizer to keep")
    p.add_argument("out")
    p.add_argument("--tokenizer", help="the GGUF file whose tokenizer and vocabulary the model takes, whatever "
                                       "the architecture (SmolLM2's serves every preset: the weights are noise, "
                                       "the file measures speed)")
    p.add_argument("--experts", metavar="N,K", help="every FFN of a dense llama preset a mixture of N experts, K used")
    p.add_argument("--tokenizer-only", action="store_true", help="write the tokenizer of MODEL alone")
    return p


def main(argv: list[str] | None = None) -> int:
    """Writes the file, saying what before (a model file is hundreds of MB
    or more) and its size after, on stderr."""
    import sys
    import time

    p = build_parser()
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    if args.tokenizer_only:
        print(f"{p.prog}: writing the tokenizer of {args.model} to {args.out}", file=sys.stderr)
        write_tokenizer(args.model, args.out)
    else:
        if args.tokenizer is None:
            p.error("--tokenizer FILE.gguf is needed (a llama file, or one --tokenizer-only wrote)")
        try:
            experts = tuple(int(v) for v in args.experts.split(",")) if args.experts else None
            if experts is not None and len(experts) != 2:
                raise ValueError(f"--experts {args.experts}: expected N,K")
            print(f"{p.prog}: writing {args.model}" + (f" with {experts[0]} experts ({experts[1]} used)"
                                                       if experts else "")
                  + f", random weights and the tokenizer of {Path(args.tokenizer).name}, to {args.out}",
                  file=sys.stderr, flush=True)
            write_random_model(args.model, args.out, args.tokenizer, experts=experts)
        except (ValueError, OSError) as e:
            p.error(str(e))
    size = Path(args.out).stat().st_size
    print(f"{p.prog}: wrote {args.out}: {size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
