"""gpt-oss (vkq.llama.architectures' gpt-oss row) on both engines and both paths.

A tiny random model in llama.cpp's gpt-oss layout (tests/tiny_gpt_oss.py:
biases on Q, K, V and the attention output, attention sinks, a mixture of
experts in every layer with biases on the router and on each expert's
gate, up and down, the clamped SwiGLU, sliding windows on the even layers,
YaRN RoPE, o200k's pre-tokenizer):

- default suite: the hyper-parameters as llama.cpp reads them (YaRN's
  angles and scale); the graph engine's greedy tokens are the float64
  reference's up to its first near-tie, its logits within NMSE 1e-3, also
  on NVIDIA's launches; each thing the row adds, left out, would move the
  reference's logits by far more; files missing what the row needs are
  refused in one line;
- slow: llama.cpp's quantizer writes the experts in MXFP4 (MXFP4_MOE; the
  attention's matrices F16, see below), llama-server decoded the
  reference's greedy tokens up to its first near-tie (its tokens kept as
  data: tests/llama_cpp_reference.py; run again where it runs), and so
  does vkq on both engines and both paths.

llama-server b10434 (on lavapipe) runs some of a gpt-oss file's products on
its CPU backend, whose Q8_0 and repacked MXFP4 kernels use AVX-VNNI
instructions that CPUs with AVX-512 VNNI alone lack (it stops with
SIGILL): the attention's matrices are F16 and the experts' MXFP4 not
repacked (LLAMA_ARG_REPACK=0), which leaves llama.cpp's arithmetic as it is.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import llama_quant
import vkq.blocks.reference as ref
import vkq.llama.config
import vkq.llama.host as host
from conftest import assert_model_file_refused
from reference_runs import (LOGITS_NMSE, MIN_COMPARED, Run, assert_generate_prints, check_decoder, quantized_run,
                            reference_run,
                            # the llama.cpp checks, run on this module's llama_cpp_run
                            test_llama_cpp_decodes_the_reference_tokens, test_llama_cpp_still_gives_the_recorded_tokens,
                            test_vkq_matches_llama_cpp)  # noqa: F401
from test_qwen import F32
from tiny_gpt_oss import EXPERT_FF, EXPERTS, HEAD_DIM, WINDOW, write_gpt_oss
from vkq.llama.architectures import ARCHITECTURES
from vkq.llama.config import yarn_mix
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

SCALE = 2.5
PROMPTS = {"tiny": "the theme of the thesis", "MXFP4_MOE": "the 12 theses"}
N_TOKENS = 10
CTX = 64


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_gpt_oss(tmp_path_factory.mktemp("gpt-oss") / "gpt-oss.gguf", scale=SCALE)


@pytest.fixture(scope="module")
def tiny_run(tiny) -> Run:
    return reference_run(tiny, PROMPTS["tiny"], N_TOKENS)


def test_the_file_reads_as_gpt_oss(tiny, tiny_run):
    f = LlamaModel(tiny, path_mode="numpy").file
    cfg = f.config
    assert (cfg.arch, cfg.head_dim, cfg.n_ff, cfg.n_expert, cfg.n_expert_used) == ("gpt-oss", HEAD_DIM, EXPERT_FF,
                                                                                  *EXPERTS)
    assert [cfg.window(i) for i in range(cfg.n_layer)] == [WINDOW, 0]
    assert cfg.yarn == (32.0, 32.0, 1.0) and cfg.n_ctx_orig == 4096 and cfg.rope_scale == 1.0
    assert cfg.rope_mscale == pytest.approx(1 + 0.1 * math.log(32))
    assert set(f.biases[0]) == {"attn_q", "attn_k", "attn_v", "attn_output"} and f.sinks[0].shape == (4,)
    assert {k: v.shape for k, v in f.expert_biases[1].items()} == {
        "ffn_gate_inp": (8,), "ffn_gate_exps": (8, EXPERT_FF), "ffn_up_exps": (8, EXPERT_FF), "ffn_down_exps": (8, 64)}
    assert set(f.norms[0]) == {"attn_norm", "post_attention_norm"}
    assert tiny_run.compared >= MIN_COMPARED


def test_yarn_angles_as_ggml_takes_them():
    """YaRN's factor per pair (ggml's rope_yarn with ext_factor 1): the
    correction dims from 32 and 1 rotations over 4096 positions at base
    150000 for heads of 64 (floored and ceiled: pairs 8 to 18 here), 1 / 32
    (interpolated) past them, 1 (extrapolated) before, a linear ramp between."""
    mix = yarn_mix(64, 4096, 150000.0, 32.0, 32.0, 1.0)
    low = math.floor(64 * math.log(4096 / (32 * 2 * math.pi)) / (2 * math.log(150000.0)))
    high = math.ceil(64 * math.log(4096 / (1 * 2 * math.pi)) / (2 * math.log(150000.0)))
    assert (low, high) == (8, 18)
    assert np.all(mix[:low + 1] == 1.0) and np.allclose(mix[high:], 1 / 32)
    ramp = 1 - (np.arange(low, high + 1) - low) / (high - low)
    assert np.allclose(mix[low:high + 1], ramp + (1 - ramp) / 32)


def test_graph_engine_matches_the_reference(backend, tiny, tiny_run):
    """The whole step on the device: sinks, biases, the clamped SwiGLU, the window, YaRN's table."""
    check_decoder(GpuLlama(tiny, backend, ctx=CTX), tiny_run, tiny_run.tokens)


def test_vkq_generate_runs_it(tiny, tiny_run, capsys):
    """`vkq generate` (graph engine): the reference's first tokens, as text."""
    assert_generate_prints(tiny, PROMPTS["tiny"], tiny_run, capsys)


def test_gpu_launches_match_the_reference(backend, tiny, tiny_run):
    """NVIDIA's launches (forced): the attention split over workgroups of 8
    positions, the sinks in the combine; the routing and biases as launched there."""
    model = GpuLlama(tiny, backend, ctx=40, launches="nvidia")
    assert {op.split for op in model.step_graph._keep if hasattr(op, "split")} == {8}
    check_decoder(model, tiny_run, tiny_run.tokens)


@pytest.mark.parametrize("wrong", ["sinks", "expert_biases", "output_bias", "glu", "yarn", "window"])
def test_what_the_architecture_adds_is_seen(tiny, tiny_run, wrong, monkeypatch):
    """Each thing the row adds, left out (or llama's SiLU for the clamped
    SwiGLU, plain RoPE for YaRN): the reference's logits move by far more
    than the tolerance."""
    model = LlamaModel(tiny, path_mode="numpy")
    f = model.file
    if wrong == "sinks":
        f.sinks = [None] * len(f.sinks)
    elif wrong == "expert_biases":
        f.expert_biases = [{} for _ in f.expert_biases]
    elif wrong == "output_bias":
        f.biases = [{k: v for k, v in b.items() if k != "attn_output"} for b in f.biases]
    elif wrong == "glu":
        monkeypatch.setitem(host.GLU, "oai", lambda g, u: host.silu(g) * u)
    elif wrong == "yarn":  # (its angles and its scale of cos and sin)
        object.__setattr__(f.config, "yarn", None)
        f.inv_freq = f.inv_freq_swa = f.inv_freq_long = f.config.inv_freq()
    else:
        row = ARCHITECTURES["gpt-oss"]
        monkeypatch.setitem(vkq.llama.config.ARCHITECTURES, "gpt-oss", dataclasses.replace(row, swa_pattern=0))
    forced = model.score(tiny_run.ids, tiny_run.tokens)
    assert max(ref.nmse(a, b) for a, b in zip(forced, tiny_run.logits)) > 30 * LOGITS_NMSE


@pytest.mark.parametrize("change, match", [
    (dict(drop=("blk.1.attn_sinks.weight",)), "'blk.1.attn_sinks.weight' is missing"),
    (dict(drop=("blk.0.ffn_down_exps.bias",)), "'blk.0.ffn_down_exps.bias' is missing"),
    (dict(drop=("blk.0.attn_output.bias",)), "'blk.0.attn_output.bias' is missing"),
    (dict(metadata={"gpt-oss.attention.sliding_window": 0}), "gpt-oss.attention.sliding_window is missing or 0"),
    (dict(extra={"blk.0.ffn_up_exps.bias": (8, 32)}), r"'blk.0.ffn_up_exps.bias' has shape \(8, 32\)"),
])
def test_bad_files_are_named(tmp_path, capsys, change, match):
    assert_model_file_refused(write_gpt_oss(tmp_path / "bad.gguf", **change), match, capsys)


# -- llama.cpp's quantizer and llama-server ------------------------------------------------------

@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The tiny model written in F32 and quantized by llama.cpp: MXFP4 experts, F16 attention (see the
    module's note), kept by content."""
    f16 = {r"attn_|output|token_embd": "F16"}
    return llama_quant.quantized_tiny(tmp_path_factory, "gpt-oss-MXFP4_MOE", "MXFP4_MOE", write_gpt_oss, scale=SCALE,
                                      expert_types=F32, overrides=f16)


@pytest.fixture(scope="module")
def llama_cpp_run(quantized):
    """The reference's run and llama.cpp's greedy tokens, kept by content; llama-server's MXFP4 not repacked."""
    return quantized_run("test_gpt_oss", "gpt-oss-MXFP4_MOE", quantized, PROMPTS["MXFP4_MOE"], N_TOKENS, ctx=CTX,
                         env={"LLAMA_ARG_REPACK": "0"})


@pytest.mark.slow
def test_the_experts_are_llama_cpp_s_mxfp4(quantized):
    from vkq.blocks.gguf_io import open_gguf

    types = {name: t.qtype for name, t in open_gguf(quantized).tensors.items()}
    assert {q for n, q in types.items() if n.endswith("_exps.weight")} == {"MXFP4"}


def test_expert_bias_op(backend):
    """ExpertBias on 7 slots (a part of each slot's vector, at an offset, as
    a stacked gate|up MUL_MAT_ID writes them): each slot plus its expert's
    row, exactly (one float32 addition), the values around untouched; with
    NVIDIA's launches a value per invocation (depth 1)."""
    from test_llama_ops import run, upload
    from vkq.llama.vector_ops import EXPERT_BIAS_WG, ExpertBias, Vectors, launches_of

    r = np.random.default_rng(4)
    n_expert, length, slots, off, stride = 5, 70, 7, 3, 150
    x0 = r.standard_normal((slots, stride)).astype(np.float32)
    bias = r.standard_normal((n_expert, length)).astype(np.float32)
    ids = np.array([4, 0, 2, 2, 1, 3, 4], np.int32)
    x = backend.tensor(stride, slots)
    x.write(x0)
    run(backend, [ExpertBias(backend.device, Vectors(x, length, off), upload(backend, bias),
                             upload(backend, ids, np.int32), slots, n_expert)], [x])
    want = x0.copy()
    want[:, off:off + length] += bias[ids]
    assert np.array_equal(x.read(), want)
    dev = launches_of(backend.device, "nvidia")
    (launch,) = ExpertBias(dev, Vectors(x, length, off), upload(backend, bias), upload(backend, ids, np.int32), slots,
                           n_expert).launches
    assert launch.depth == 1 and launch.groups == (-(-length // EXPERT_BIAS_WG), slots, 1)
