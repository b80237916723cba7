"""Phi-3 (vkq.llama.architectures' phi3 row: Phi-3, 3.5 and 4-mini's layout)
on both engines and both paths.

A tiny random model in llama.cpp's Phi-3 layout (tests/tiny_phi3.py: Q|K|V
one matrix, gate|up one matrix, LongRoPE's long and short factors and its
attention factor, neox RoPE, a SentencePiece vocabulary):

- default suite: the fused matrices split into the rows llama.cpp reads
  as Q, K, V, gate and up; the factors taken as llama.cpp takes them (the
  long ones where the context passes the original one); the graph
  engine's greedy tokens are the float64 reference's up to its first
  near-tie, its logits within NMSE 1e-3; the wrong factors, no attention
  factor, or gate and up swapped would move the logits by far more; files
  whose fused matrices are not as the metadata says are refused in one line;
- slow: llama.cpp's quantizer writes the model as Q4_0 (short factors) and
  Q4_K_M (long factors; at these widths its Q5_0 and Q8_0), llama-server
  decoded the reference's greedy tokens up to its first near-tie (its
  tokens kept as data: tests/llama_cpp_reference.py; run again where it
  runs), and so does vkq on both engines and both paths.
"""
from __future__ import annotations

import numpy as np
import pytest

import llama_quant
import vkq.blocks.reference as ref
from conftest import assert_model_file_refused
from reference_runs import (LOGITS_NMSE, MIN_COMPARED, Run, assert_generate_prints, check_decoder, quantized_run,
                            reference_run,
                            # the llama.cpp checks, run on this module's llama_cpp_run
                            test_llama_cpp_decodes_the_reference_tokens, test_llama_cpp_still_gives_the_recorded_tokens,
                            test_vkq_matches_llama_cpp)  # noqa: F401
from test_qwen import F32
from tiny_llama import TINY
from tiny_phi3 import ATTN_FACTOR, LONG_ORIGINAL, ORIGINAL, write_phi3
from vkq.blocks.gguf_io import open_gguf
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

SCALE = 2.5
CTX = 512  # the context the tests (and llama-server) take: the short factors, or with long=True the long ones
# Per file, a prompt whose reference run of N_TOKENS greedy tokens has no early near-tie.
PROMPTS = {"tiny": "The river rose through the night", "Q4_0": "The river rose through the night",
           "Q4_K_M": "the theme of the thesis"}
N_TOKENS = 10


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_phi3(tmp_path_factory.mktemp("phi3") / "phi3.gguf", scale=SCALE)


@pytest.fixture(scope="module")
def tiny_run(tiny) -> Run:
    return reference_run(tiny, PROMPTS["tiny"], N_TOKENS, ctx=CTX)


def test_fused_matrices_split_into_llama_cpp_s_rows(tiny):
    """attn_qkv's rows are Q's, then K's, then V's; ffn_up's the gate's, then up's."""
    f = LlamaModel(tiny, path_mode="numpy", ctx=CTX).file
    fused = open_gguf(tiny).tensors
    hd = TINY["n_embd"] // TINY["n_head"]
    q, kv, ff = TINY["n_head"] * hd, TINY["n_head_kv"] * hd, TINY["n_ff"]

    def rows(t):
        return ref.dequantize(t.qtype, t.shape, t.data)
    for i in range(TINY["n_layer"]):
        qkv, gate_up = rows(fused[f"blk.{i}.attn_qkv.weight"]), rows(fused[f"blk.{i}.ffn_up.weight"])
        for role, want in (("attn_q", qkv[:q]), ("attn_k", qkv[q:q + kv]), ("attn_v", qkv[q + kv:]),
                           ("ffn_gate", gate_up[:ff]), ("ffn_up", gate_up[ff:])):
            assert np.array_equal(rows(f.tensors[f"blk.{i}.{role}.weight"]), want), (i, role)
    cfg = f.config
    assert cfg.arch == "phi3" and cfg.architecture.neox and cfg.rope_attn_factor == np.float32(ATTN_FACTOR)


def test_long_factors_past_the_original_context(tmp_path):
    """As llama.cpp takes them: the short factors at a context up to the
    original one, the long ones past it."""
    short = LlamaModel(write_phi3(tmp_path / "short.gguf"), path_mode="numpy", ctx=CTX).file
    long = LlamaModel(write_phi3(tmp_path / "long.gguf", long=True), path_mode="numpy", ctx=CTX).file
    assert short.config.n_ctx_orig == ORIGINAL and long.config.n_ctx_orig == LONG_ORIGINAL
    factors = {k: short.vector(f"rope_factors_{k}.weight") for k in ("long", "short")}
    base = short.config.inv_freq()
    assert np.allclose(short.layer_inv_freq(0, CTX), base / factors["short"])
    assert np.allclose(long.layer_inv_freq(0, CTX), base / factors["long"])
    assert np.allclose(long.layer_inv_freq(0, LONG_ORIGINAL), base / factors["short"])


def test_graph_engine_matches_the_reference(backend, tiny, tiny_run):
    assert tiny_run.compared >= MIN_COMPARED
    check_decoder(GpuLlama(tiny, backend, ctx=CTX), tiny_run, tiny_run.tokens)


def test_vkq_generate_runs_it(tiny, tiny_run, capsys):
    """`vkq generate` (graph engine, a context of 512: the short factors): the reference's first tokens, as text."""
    assert_generate_prints(tiny, PROMPTS["tiny"], tiny_run, capsys, "-c", str(CTX))


def test_unfused_qkv_runs_too(backend, tmp_path):
    """Q, K and V as three matrices (llama.cpp reads either): the graph engine as the reference."""
    path = write_phi3(tmp_path / "unfused.gguf", scale=SCALE, fused_qkv=False)
    want = reference_run(path, PROMPTS["tiny"], N_TOKENS, ctx=CTX)
    check_decoder(GpuLlama(path, backend, ctx=CTX), want, want.tokens)


@pytest.mark.parametrize("wrong", ["factors", "attn_factor", "gate_up"])
def test_what_the_architecture_adds_is_seen(tiny, tiny_run, wrong, monkeypatch):
    """The long factors in a short context, no attention factor, or gate
    and up taken the other way round: the logits move by far more than the
    tolerance."""
    model = LlamaModel(tiny, path_mode="numpy", ctx=CTX)
    f = model.file
    if wrong == "factors":
        f.inv_freq = f.inv_freq_long
    elif wrong == "attn_factor":
        object.__setattr__(f.config, "rope_attn_factor", 1.0)
    else:
        for i in range(f.config.n_layer):
            gate, up = (f"blk.{i}.{r}.weight" for r in ("ffn_gate", "ffn_up"))
            f.tensors[gate], f.tensors[up] = f.tensors[up], f.tensors[gate]
        model = LlamaModel(None, path_mode="numpy", ctx=CTX, file=f)  # (its mat-vecs read the swapped tensors)
    forced = model.score(tiny_run.ids, tiny_run.tokens)
    assert max(ref.nmse(a, b) for a, b in zip(forced, tiny_run.logits)) > 30 * LOGITS_NMSE


@pytest.mark.parametrize("change, match", [
    (dict(extra={"blk.0.attn_qkv.weight": (96, 64)}), r"'blk.0.attn_qkv.weight' has shape \(96, 64\), expected "
                                                       r"\(128, 64\) \(attn_q \| attn_k \| attn_v\)"),
    (dict(reshape={"blk.1.ffn_up.weight": (128, 64)}), r"'blk.1.ffn_up.weight' has shape \(128, 64\), expected "
                                                      r"\(256, 64\) \(ffn_gate \| ffn_up\)"),
    (dict(fused_qkv=False, extra={"blk.0.attn_qkv.weight": (128, 64)}),
     "layer 0 has both 'blk.0.attn_qkv.weight' and the matrices"),
])
def test_bad_files_are_named(tmp_path, capsys, change, match):
    assert_model_file_refused(write_phi3(tmp_path / "bad.gguf", **change), match, capsys)


# -- llama.cpp's quantizer and llama-server ------------------------------------------------------

FILE_TYPES = {"Q4_0": False, "Q4_K_M": True}  # file type -> the long factors


@pytest.fixture(scope="module", params=list(FILE_TYPES))
def quantized(request, tmp_path_factory):
    """(file type, the tiny model written in F32 and quantized by llama.cpp), kept by content."""
    ftype = request.param
    return ftype, llama_quant.quantized_tiny(tmp_path_factory, f"phi3-{ftype}", ftype, write_phi3, scale=SCALE,
                                             long=FILE_TYPES[ftype], expert_types=F32)


@pytest.fixture(scope="module")
def llama_cpp_run(quantized):
    """The reference's run and llama.cpp's greedy tokens, kept by content. The
    reference's context is the file's (4096), llama-server's and vkq's CTX: the
    same factors either way (the original context is 4096, or 128 for the long ones)."""
    ftype, path = quantized
    return quantized_run("test_phi3", f"phi3-{ftype}", path, PROMPTS[ftype], N_TOKENS, ctx=CTX)
