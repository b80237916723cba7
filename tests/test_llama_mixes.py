"""The presets' type mixes (vkq.commands.presets.mix_type) against llama.cpp's own
quantizer: a tiny random model of each test shape, in F16, is quantized by
`llama_model_quantize` of the pinned llama.cpp wheel (tests/llama_quant.py)
to each file type a preset offers, and every weight matrix of the file must
have the type mix_type gives a ModelSpec of the same shape.

The shapes exercise the rules: 16 and 8 layers (the first and last eighth,
use_more_bits), 4 and 2 query heads per KV head, untied and tied output
heads, 4 experts (V's rule for >= 4 experts); and a K of 320, not a whole
number of 256-value blocks, where llama.cpp falls back to other types
(presets.FALLBACK), as SmolLM2's K of 576 makes it. The i-quant file types are made with an importance
matrix (a flat one: its values change no type choice, only that there is
one) and the others without, as mix_type assumes.

The i-quant and BF16 quantizations take 1-25 s each on two cores, so all but
a few are slow-marked. llama.cpp's types are kept as data
(tests/data/llama_cpp_reference/type_mixes.json), checked against it where
libllama runs, standing in for it where it cannot.
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import finish_gguf
from vkq.blocks.gguf_io import open_gguf
from vkq.commands import presets
from vkq.commands.model_file import add_hyperparameters

import llama_quant
from llama_cpp_reference import Answers

SPECS = {s.name: s for s in (
    presets.ModelSpec("gqa4", "llama", hidden=256, n_layer=16, n_head=8, n_head_kv=2, head_dim=32,
                     ffn=512, vocab=256, tied_output=False),
    presets.ModelSpec("gqa2-tied", "llama", hidden=256, n_layer=8, n_head=8, n_head_kv=4, head_dim=32,
                     ffn=256, vocab=256, tied_output=True),
    presets.ModelSpec("k320", "llama", hidden=320, n_layer=8, n_head=5, n_head_kv=1, head_dim=64,
                     ffn=512, vocab=256, tied_output=False),
    presets.ModelSpec("moe4", "qwen3moe", hidden=256, n_layer=8, n_head=4, n_head_kv=2, head_dim=64,
                     ffn=0, vocab=256, tied_output=False, n_expert=4, n_expert_used=2, expert_ffn=256),
)}
# llama.cpp's name of a file type where it is not the mix's.
FTYPE = {"MXFP4": "MXFP4_MOE"}
FAST = {("gqa4", "Q4_K_M"), ("gqa4", "IQ4_XS"), ("gqa2-tied", "IQ3_XXS"), ("k320", "Q4_K_M"), ("k320", "Q2_K")}


def cases():
    for name, spec in SPECS.items():
        for mix in presets.MIXES + (("MXFP4",) if spec.is_moe else ()):
            marks = () if (name, mix) in FAST else (pytest.mark.slow,)
            yield pytest.param(name, mix, id=f"{name}-{mix}", marks=marks)


def shapes(spec: presets.ModelSpec) -> list[presets.Matrix]:
    """The spec's weight matrices (names, roles, shapes; the Q8_0 mix's types are not used)."""
    return spec.matrices("Q8_0")


def write_f16(spec: presets.ModelSpec, path: Path) -> Path:
    """A GGUF of the spec's architecture that llama.cpp's quantizer loads:
    its hyperparameters, F16 random weight matrices, F32 norms."""
    w = gguf.GGUFWriter(str(path), spec.arch)
    add_hyperparameters(w, spec, context=256, rms_eps=1e-6)
    rng = np.random.default_rng(0)
    matrices = [(m.name, m.shape, m.role == "ffn_gate_inp") for m in shapes(spec)]
    if not spec.tied_output:
        matrices.append(("token_embd.weight", (spec.vocab, spec.hidden), False))
    for name, shape, is_f32 in matrices:
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32 if is_f32 else np.float16))
    norms = ["output_norm"] + [f"blk.{i}.{n}" for i in range(spec.n_layer) for n in ("attn_norm", "ffn_norm")]
    for name in norms:
        w.add_tensor(f"{name}.weight", np.ones(spec.hidden, np.float32))
    return finish_gguf(w, path)


def flat_imatrix(spec: presets.ModelSpec) -> dict[str, np.ndarray]:
    """An importance matrix of every quantized matrix: one value per column (per expert for a stack)."""
    return {m.name: np.ones(m.params // m.shape[-2], np.float32)
            for m in shapes(spec) if m.role != "ffn_gate_inp"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    where = tmp_path_factory.mktemp("llama-mixes")
    return {name: write_f16(spec, where / f"{name}-f16.gguf") for name, spec in SPECS.items()}


def llama_cpp_types(source: Path, out: Path, spec: presets.ModelSpec, mix: str) -> dict[str, str]:
    """The block type of every tensor of the file llama.cpp's quantizer writes."""
    imatrix = flat_imatrix(spec) if mix in presets.IQ_MIXES else None
    llama_quant.quantizer().quantize(source, out, FTYPE.get(mix, mix), imatrix)
    return {n: t.qtype for n, t in open_gguf(out).tensors.items()}


@pytest.mark.parametrize("name, mix", list(cases()))
def test_mix_types_are_llama_cpp_s(sources, tmp_path, name, mix):
    """(llama.cpp's types kept as data: tests/llama_cpp_reference.Answers, checked where libllama runs.)"""
    spec = SPECS[name]
    answers = Answers("type_mixes", sources[name], llama_quant.unavailable() is None, f"{name} F16")
    written = answers.answer("types", mix, lambda: llama_cpp_types(sources[name], tmp_path / "q.gguf", spec, mix))
    answers.close()
    ours = {m.name: m.qtype for m in spec.matrices(mix)}  # mix_type, then the fallback
    differ = {n: (ours[n], written[n]) for n in ours if ours[n] != written[n]}
    assert not differ, f"{name}:{mix} (vkq's type, llama.cpp's) {differ}"
