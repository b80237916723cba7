"""Qwen2, Qwen3 and Qwen3-MoE (vkq.llama.architectures) on both engines and both paths.

Tiny random models in each layout (tests/tiny_qwen.py: Qwen2's Q/K/V
biases, Qwen3's per-head Q/K norms and heads wider than n_embd / n_head,
Qwen3-MoE's experts of their own width in every layer, all with neox RoPE
and the "qwen2" pre-tokenizer):

- default suite: the graph engine's greedy tokens are the float64
  reference's up to its first near-tie, and its logits within NMSE 1e-3,
  per architecture; a wrong RoPE mode, a bias or norm left out would move
  the reference's logits by far more; files missing what their
  architecture needs, or holding what vkq would not apply, are refused in
  one line; the qwen2 pre-tokenizer gives llama.cpp's tokens;
- slow: llama.cpp's quantizer writes each model as Q4_0 and Q4_K_M (from
  F32; at these widths its Q4_K_M is Q5_0 and Q8_0, its fallbacks for rows
  not of 256-value blocks, but for the Qwen3 files' attn_output in Q4_K),
  llama-server decoded the reference's greedy tokens up to its first
  near-tie (its tokens kept as data: tests/llama_cpp_reference.py; run
  again where it runs), and so does vkq on both engines and both paths, its
  teacher-forced logits within NMSE 1e-3 of the reference's.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import llama_quant
import vkq.blocks.reference as ref
import vkq.llama.config
from conftest import assert_model_file_refused
from reference_runs import (LOGITS_NMSE, MIN_COMPARED, Run, assert_generate_prints, check_decoder,
                            quantized_run, reference_run,
                            # the llama.cpp checks, run on this module's llama_cpp_run
                            test_llama_cpp_decodes_the_reference_tokens, test_llama_cpp_still_gives_the_recorded_tokens,
                            test_vkq_matches_llama_cpp)  # noqa: F401
from test_llama_ops import NMSE_F32, reduction, run, upload  # noqa: F401 (reduction: a fixture)
from tiny_qwen import EXPERT_FF, EXPERTS, HEAD_DIM, write_qwen
from vkq.llama.architectures import ARCHITECTURES
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel
from vkq.llama.vector_ops import HeadNorm, Vectors

ARCHS = ("qwen2", "qwen3", "qwen3moe")
# The matrices' scale, per architecture: greedy margins of ~0.1-4 logits at
# every one of the N_TOKENS steps, in the tiny file and in llama.cpp's Q4_0
# and Q4_K_M (1.0 leaves near-ties; chosen so that none is within NEAR_TIE).
SCALE = {"qwen2": 2.5, "qwen3": 2.5, "qwen3moe": 3.5}
PROMPT = "the theme of the thesis"
N_TOKENS = 10
# Every matrix F32 in the source llama.cpp quantizes (tiny_llama's roles).
F32 = {r: "F32" for r in ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                          "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")}

@pytest.fixture(scope="module", params=ARCHS)
def tiny(request, tmp_path_factory):
    """(arch, the tiny model as tiny_llama writes its blocks: Q8_0, attn_v Q4_0)."""
    arch = request.param
    return arch, write_qwen(tmp_path_factory.mktemp(arch) / f"{arch}.gguf", arch, scale=SCALE[arch])


@pytest.fixture(scope="module")
def tiny_run(tiny) -> Run:
    return reference_run(tiny[1], PROMPT, N_TOKENS)


def test_the_file_reads_as_its_architecture(tiny, tiny_run):
    arch, path = tiny
    f = LlamaModel(path, path_mode="numpy").file
    assert f.config.arch == arch and f.config.head_dim == HEAD_DIM[arch]
    assert f.config.architecture.neox
    assert (f.config.n_expert, f.config.n_expert_used, f.config.n_ff) == (
        EXPERTS + (EXPERT_FF,) if arch == "qwen3moe" else (0, 0, 128))
    assert set(f.biases[0]) == set(ARCHITECTURES[arch].biases)
    assert set(f.head_norms[0]) == set(ARCHITECTURES[arch].head_norms)
    assert tiny_run.compared >= MIN_COMPARED


def test_graph_engine_matches_the_reference(backend, tiny, tiny_run):
    """The whole step on the device (the prompt of 13 tokens in chunks of 8
    and 5, then one token per submit), mmvq where the dispatcher takes it."""
    model = GpuLlama(tiny[1], backend)
    check_decoder(model, tiny_run, tiny_run.tokens)


def test_vkq_generate_runs_it(tiny, tiny_run, capsys):
    """`vkq generate` (graph engine): the reference's first tokens, as text."""
    assert_generate_prints(tiny[1], PROMPT, tiny_run, capsys)


@pytest.mark.parametrize("wrong", ["rope", "additions"])
def test_what_the_architecture_adds_is_seen(tiny, tiny_run, wrong, monkeypatch):
    """llama's RoPE pairs instead of neox's, or the architecture's biases and
    head norms left out: the logits move by far more than the tolerance."""
    arch, path = tiny
    model = LlamaModel(path, path_mode="numpy")
    f = model.file
    if wrong == "rope":
        row = ARCHITECTURES[arch]
        monkeypatch.setitem(vkq.llama.config.ARCHITECTURES, arch, dataclasses.replace(row, rope="norm"))
    else:
        assert any(f.biases) or any(f.head_norms)
        f.biases, f.head_norms = [{} for _ in f.biases], [{} for _ in f.head_norms]
    assert ref.nmse(model.logits(tiny_run.ids), tiny_run.logits[0]) > 30 * LOGITS_NMSE


@pytest.mark.parametrize("arch, change, match", [
    ("qwen2", dict(drop=("blk.1.attn_k.bias",)), "'blk.1.attn_k.bias' is missing"),
    ("qwen2", dict(extra={"blk.0.attn_v.bias": (8,)}), r"'blk.0.attn_v.bias' has shape \(8,\)"),
    ("qwen3", dict(drop=("blk.0.attn_q_norm.weight",)), "'blk.0.attn_q_norm.weight' is missing"),
    ("qwen3", dict(extra={"blk.0.attn_output.bias": (64,)}), "'blk.0.attn_output.bias' is a bias vkq generate "
                                                             "does not add"),
    ("qwen3", dict(metadata={"qwen3.expert_count": 4, "qwen3.expert_used_count": 2}),
     "qwen3 architecture has no mixture-of-experts layers"),
    ("qwen3moe", dict(experts=None), "every qwen3moe layer is a mixture of experts"),
    ("qwen3moe", dict(metadata={"qwen3moe.expert_feed_forward_length": 64}),
     r"'blk.0.ffn_gate_exps.weight' has shape \(16, 32, 64\), expected \(16, 64, 64\)"),
    ("qwen3moe", dict(metadata={"qwen3moe.expert_weights_scale": 2.5}), "expert_weights_scale 2.5 is not supported"),
])
def test_bad_files_are_named(tmp_path, capsys, arch, change, match):
    assert_model_file_refused(write_qwen(tmp_path / "bad.gguf", arch, **change), match, capsys)


def test_a_llama_file_with_biases_is_refused(tmp_path):
    """llama's row adds no bias: a llama file with one is refused, not run without it."""
    from tiny_llama import write_gguf

    path = write_gguf(tmp_path / "biased.gguf", extra={"blk.0.attn_q.bias": (64,)})
    with pytest.raises(ValueError, match="'blk.0.attn_q.bias' is a bias vkq generate does not add"):
        LlamaModel(path, path_mode="numpy")


TEXTS = ["the 12 theses", "x 123 1212 12.5", "it's 2024\n\n  ok", "a1b22c333"]


def test_qwen2_pre_tokenizer_equals_llama_cpp(tiny):
    """Digits one by one (the vocabulary merges "1 2": llama 3's regex would
    keep "12" whole, Qwen's never), as llama.cpp's tokenizer splits them."""
    from llama_vocab import Witness

    tok = LlamaModel(tiny[1], path_mode="numpy").tokenizer
    with Witness(tiny[1], f"tiny {tiny[0]}") as witness:
        for text in TEXTS:
            assert tok.encode(text) == witness.tokenize(text), text
    twelve = tok.encode("12")[-1]
    assert tok.decode([twelve]) == "2" and len(tok.encode("12", add_special=False)) == 2


# -- llama.cpp's quantizer and llama-server ------------------------------------------------------

FILE_TYPES = ("Q4_0", "Q4_K_M")


@pytest.fixture(scope="module", params=FILE_TYPES)
def quantized(request, tiny, tmp_path_factory):
    """(arch, file type, the tiny model written in F32 and quantized by llama.cpp), kept by content."""
    arch, ftype = tiny[0], request.param
    return arch, ftype, llama_quant.quantized_tiny(tmp_path_factory, f"{arch}-{ftype}", ftype, write_qwen, arch,
                                                   scale=SCALE[arch], expert_types=F32)


@pytest.fixture(scope="module")
def llama_cpp_run(quantized):
    """The reference's run and llama.cpp's recorded greedy tokens on the quantized file."""
    arch, ftype, path = quantized
    return quantized_run("test_qwen", f"{arch}-{ftype}", path, PROMPT, N_TOKENS)


# -- the device's op -----------------------------------------------------------------------------

@pytest.mark.parametrize("bias, norm", [(True, False), (False, True), (True, True)])
def test_head_norm_op(backend, reduction, bias, norm):
    """HeadNorm in place on 3 vectors at an offset of their tensor (heads of
    40 values: no whole vec4s or blocks), against float64, with either
    reduction; the values around them untouched."""

    r = np.random.default_rng(5)
    heads, hd, n, off, eps = 3, 40, 3, 6, 1e-5
    length = off + heads * hd + 2
    values = r.standard_normal((n, length)).astype(np.float32)
    b, w = r.standard_normal(heads * hd).astype(np.float32), (1 + 0.1 * r.standard_normal(hd)).astype(np.float32)
    x = backend.tensor(length, n)
    x.write(values)
    run(backend, [HeadNorm(backend.device, Vectors(x, heads * hd, off), hd if norm else heads * hd, n,
                           bias=upload(backend, b) if bias else None, weight=upload(backend, w) if norm else None,
                           eps=eps)], [x])
    want = values.astype(np.float64)
    v = want[:, off:off + heads * hd] + (b if bias else 0)
    if norm:
        v = v.reshape(n, heads, hd)
        v = (v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * w).reshape(n, -1)
    want[:, off:off + heads * hd] = v
    got = x.read()
    assert np.array_equal(got[:, :off], values[:, :off]) and np.array_equal(got[:, -2:], values[:, -2:])
    assert ref.nmse(got, want) < NMSE_F32


def test_qwen2_bias_gpu_launch(backend, tmp_path):
    """Qwen2's Q/K/V biases with NVIDIA's launches (forced): the step adds
    them a head at a time (HeadNorm's workgroups of 32 over head_dim
    values: the tiny file's Q|K, stacked, and V, each a workgroup per
    head), so that
    at Qwen2.5-0.5B's shape (14 + 2 * 2 heads of 64: 1,152 values) the op
    is 18 workgroups at depth 2, where the whole vector as one "head" was
    one workgroup at depth 36 (issue 47's bound: 16)."""
    from vkq.commands.presets import PRESETS
    from vkq.llama.vector_ops import launches_of

    model = GpuLlama(write_qwen(tmp_path / "qwen2.gguf", "qwen2", scale=SCALE["qwen2"]), backend, "auto", ctx=16,
                     launches="nvidia")
    cfg = model.config
    biases = [r.launch for r in model.step_launches() if r.label.startswith("bias ")]
    assert sum(launch.groups[0] for launch in biases) == cfg.n_head + 2 * cfg.n_head_kv
    assert {(launch.groups[1:], launch.invocations, launch.depth) for launch in biases} == {
        ((1, 1), 32, -(-HEAD_DIM["qwen2"] // 32))}

    spec = PRESETS["qwen2.5-0.5b"]
    qkv = (spec.n_head + 2 * spec.n_head_kv) * spec.head_dim
    dev = launches_of(backend.device, "nvidia")
    (launch,) = HeadNorm(dev, Vectors(backend.tensor(qkv), qkv), spec.head_dim, bias=backend.tensor(qkv)).launches
    assert (qkv, launch.groups, launch.invocations, launch.depth) == (1152, (18, 1, 1), 32, 2)
    (whole,) = HeadNorm(dev, Vectors(backend.tensor(qkv), qkv), qkv, bias=backend.tensor(qkv)).launches
    assert (whole.groups, whole.depth) == ((1, 1, 1), 36)


def test_partial_neox_rope_on_the_graph_engine(backend, tmp_path):
    """RoPE over 32 of a head's 64 values in neox mode (pairs (i, i + 16), the
    rest left as they are): the graph engine's attention as the reference's."""
    path = write_qwen(tmp_path / "partial.gguf", "qwen3", scale=SCALE["qwen3"],
                      metadata={"qwen3.rope.dimension_count": 32})
    want = reference_run(path, PROMPT, N_TOKENS)
    check_decoder(GpuLlama(path, backend), want, want.tokens)
