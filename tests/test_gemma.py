"""Gemma 2 and Gemma 3 (vkq.llama.architectures) on both engines and both paths.

Tiny random models in each layout (tests/tiny_gemma.py: GeGLU, the
embedding scaled by sqrt(n_embd), the norms after attention and after the
FFN, sliding windows of 5 positions on Gemma 2's even layers and on five of
Gemma 3's six, Gemma 3's per-head Q/K norms and its global layer's own RoPE
base and linear scaling, Gemma 2's soft-capped scores and logits; a
SentencePiece vocabulary as Gemma's is written):

- default suite: the graph engine's greedy tokens are the float64
  reference's up to its first near-tie, its logits within NMSE 1e-3; each
  thing the architecture adds, left out or done as llama's, would move the
  reference's logits by several times that; the 27B models' query scale; files
  missing what their architecture needs are refused in one line;
- slow: llama.cpp's quantizer writes each model as Q4_0 and Q4_K_M (from
  F32; at these widths Q4_K_M's matrices are Q5_0 and Q8_0, its fallbacks
  for rows not of 256-value blocks, but attn_output's in Q4_K),
  llama-server decoded the reference's greedy tokens up to its first
  near-tie (its tokens kept as data: tests/llama_cpp_reference.py; run
  again where it runs), and so does vkq on both engines and both paths, its
  teacher-forced logits within NMSE 1e-3 of the reference's.
- with libllama: the tokenizer gives its ids on hard text.
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
from test_qwen import F32
from tiny_gemma import ARCHS, HEAD_DIM, LAYERS, WINDOW, write_gemma
from vkq.blocks.gguf_io import open_gguf
from vkq.blocks.spm import SpmTokenizer
from vkq.llama.architectures import ARCHITECTURES
from vkq.llama.config import LlamaConfig
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

SCALE = 2.5
# Per architecture and file ("tiny", or llama.cpp's file type), a prompt whose reference run of N_TOKENS
# greedy tokens has no near-tie (the smallest top-1 margins 0.06 to 0.22 logits, 2026-12-06).
PROMPTS = {"gemma2": {"tiny": "Dear Sir, thank you for your letter", "Q4_0": "She asked whether the train left",
                      "Q4_K_M": "The river rose through the night"},
           "gemma3": dict.fromkeys(("tiny", "Q4_0", "Q4_K_M"), "The river rose through the night")}
N_TOKENS = 10


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request, tmp_path_factory):
    """(arch, the tiny model as tiny_llama writes its blocks: Q8_0, attn_v Q4_0)."""
    arch = request.param
    return arch, write_gemma(tmp_path_factory.mktemp(arch) / f"{arch}.gguf", arch, scale=SCALE)


@pytest.fixture(scope="module")
def tiny_run(tiny) -> Run:
    return reference_run(tiny[1], PROMPTS[tiny[0]]["tiny"], N_TOKENS)


def test_the_file_reads_as_its_architecture(tiny, tiny_run):
    arch, path = tiny
    f = LlamaModel(path, path_mode="numpy").file
    cfg = f.config
    assert (cfg.arch, cfg.n_layer, cfg.head_dim, cfg.n_swa) == (arch, LAYERS[arch], HEAD_DIM, WINDOW)
    assert cfg.architecture.neox and isinstance(f.tokenizer, SpmTokenizer) and not f.tokenizer.add_space_prefix
    assert cfg.query_scale == 1 / np.sqrt(HEAD_DIM)
    assert set(f.head_norms[0]) == set(ARCHITECTURES[arch].head_norms)
    assert set(f.norms[0]) == {"attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm"}
    if arch == "gemma2":  # the even layers slide, both caps as the file sets them
        assert [cfg.window(i) for i in range(cfg.n_layer)] == [WINDOW, 0]
        assert (cfg.attn_softcap, cfg.final_softcap) == (4.0, 12.0)
        assert f.inv_freq_swa is f.inv_freq
    else:  # the sixth layer alone is global, with the file's RoPE base and scaling; the others base 10000
        assert [cfg.window(i) for i in range(cfg.n_layer)] == [WINDOW] * 5 + [0]
        assert (cfg.attn_softcap, cfg.final_softcap) == (0, 0)
        assert np.allclose(f.inv_freq, 1e6 ** (-np.arange(HEAD_DIM // 2) / (HEAD_DIM // 2)) / 8)
        assert np.allclose(f.inv_freq_swa, 1e4 ** (-np.arange(HEAD_DIM // 2) / (HEAD_DIM // 2)))
    assert tiny_run.compared >= MIN_COMPARED


def test_graph_engine_matches_the_reference(backend, tiny, tiny_run):
    """The whole step on the device (the prompt in chunks, then one token
    per submit, past the window), the dispatcher's path."""
    check_decoder(GpuLlama(tiny[1], backend), tiny_run, tiny_run.tokens)


def test_vkq_generate_runs_it(tiny, tiny_run, capsys):
    """`vkq generate` (graph engine): the reference's first tokens, as text."""
    assert_generate_prints(tiny[1], PROMPTS[tiny[0]]["tiny"], tiny_run, capsys)


def test_gpu_launches_match_the_reference(backend, tiny, tiny_run):
    """NVIDIA's launches (forced: GpuLlama's `launches`) in a context of 40:
    the attention's positions split over workgroups of 8 (splits wholly
    before a sliding window do nothing, the combine folded into the last
    split's workgroup counts the window's splits only), key lanes and value
    rows; the argmax in parts, the soft-cap before it."""
    model = GpuLlama(tiny[1], backend, ctx=40, launches="nvidia")
    assert {op.split for op in model.step_graph._keep if hasattr(op, "split")} == {8}
    check_decoder(model, tiny_run, tiny_run.tokens)


WRONGS = ["window", "softcap", "post_norms", "embed_scale", "glu", "swa_rope"]


@pytest.mark.parametrize("wrong", WRONGS)
def test_what_the_architecture_adds_is_seen(tiny, tiny_run, wrong, monkeypatch):
    """Each thing the row adds, left out (or llama's SiLU for GeGLU, the
    global layers' RoPE on the sliding ones): the reference's logits move
    by five times the tolerance or more at some step (the window's once the
    run is past it; GELU against SiLU about ten times, the FFN's output
    normed after it)."""
    arch, path = tiny
    row = ARCHITECTURES[arch]
    change = {"window": dict(swa_pattern=0), "softcap": dict(softcap=False), "post_norms": dict(post_norms=False),
              "embed_scale": dict(embed_scale=False), "glu": dict(glu="silu"), "swa_rope": dict(swa_rope_base=None)}
    if wrong == "softcap" and not row.softcap or wrong == "swa_rope" and row.swa_rope_base is None:
        pytest.skip(f"{arch} has no {wrong}")
    monkeypatch.setitem(vkq.llama.config.ARCHITECTURES, arch, dataclasses.replace(row, **change[wrong]))
    if wrong == "post_norms":  # (the layers' post-norm weights read, then not applied)
        monkeypatch.setattr(vkq.llama.architectures.Architecture, "layer_vectors", property(
            lambda self: ("attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm")))
    model = LlamaModel(path, path_mode="numpy")
    forced = model.score(tiny_run.ids, tiny_run.tokens)
    assert max(ref.nmse(a, b) for a, b in zip(forced, tiny_run.logits)) > 5 * LOGITS_NMSE


def test_the_27b_query_scale(tmp_path):
    """llama.cpp scales the queries of the 27B models (46 layers of Gemma 2,
    62 of Gemma 3; their query_pre_attn_scalar is n_embd / n_head) by
    1 / sqrt(n_embd / n_head), of the others by 1 / sqrt(head_dim)."""
    for arch, layers in (("gemma2", 46), ("gemma3", 62)):
        path = write_gemma(tmp_path / f"{arch}.gguf", arch, metadata={f"{arch}.block_count": layers})
        cfg = LlamaConfig.from_gguf(open_gguf(path))
        assert cfg.query_scale == pytest.approx(1 / np.sqrt(64 // 4)) and cfg.head_dim == HEAD_DIM


@pytest.mark.parametrize("arch, change, match", [
    ("gemma3", dict(metadata={"gemma3.attention.sliding_window": 0}), "gemma3.attention.sliding_window is missing"),
    ("gemma2", dict(drop=("blk.1.post_ffw_norm.weight",)), "'blk.1.post_ffw_norm.weight' is missing"),
    ("gemma3", dict(drop=("blk.0.attn_k_norm.weight",)), "'blk.0.attn_k_norm.weight' is missing"),
    ("gemma2", dict(metadata={"gemma2.attn_logit_softcapping": -1.0}), "attn_logit_softcapping is -1"),
    ("gemma2", dict(tied=False), "'output.weight': a gemma2 model's output head is token_embd.weight"),
])
def test_bad_files_are_named(tmp_path, capsys, arch, change, match):
    assert_model_file_refused(write_gemma(tmp_path / "bad.gguf", arch, **change), match, capsys)


# -- llama.cpp's quantizer, llama-server and libllama's tokenizer ---------------------------------

FILE_TYPES = ("Q4_0", "Q4_K_M")


@pytest.fixture(scope="module", params=FILE_TYPES)
def quantized(request, tiny, tmp_path_factory):
    """(arch, file type, the tiny model written in F32 and quantized by llama.cpp), kept by content."""
    arch, ftype = tiny[0], request.param
    return arch, ftype, llama_quant.quantized_tiny(tmp_path_factory, f"{arch}-{ftype}", ftype, write_gemma, arch,
                                                   scale=SCALE, expert_types=F32)


@pytest.fixture(scope="module")
def llama_cpp_run(quantized):
    """The reference's run and llama.cpp's greedy tokens on the quantized file, kept by content."""
    arch, ftype, path = quantized
    return quantized_run("test_gemma", f"{arch}-{ftype}", path, PROMPTS[arch][ftype], N_TOKENS)


# Whitespace runs, CJK, emoji, digits, Gemma's turn markers typed in the text, bytes past the vocabulary.
HARD_TEXTS = ["  two  spaces,\tand a tab\n\n\nthree newlines   ", "日本語のテキスト 中文 한국어",
              "emoji 🦙🔥 ok 👍🏽",
              "1234567890 12.5 3,141", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
              "x<sep>!y<sep>z", "\u00e9t\u00e9 na\u00efve \u2581 \u2581\u2581"]


def test_gemma_vocabulary_equals_llama_cpp(tmp_path):
    """Gemma's SentencePiece vocabulary as Gemma files hold it (no space
    prefix, BOS added, byte fallback over all 256 bytes, control tokens for
    the turn markers): vkq's ids are libllama's on hard text, and decode to
    it (libllama's answers kept as data where it cannot run: tests/llama_vocab.Witness)."""
    import gguf

    import spm_vocab
    from llama_vocab import Witness

    V = gguf.GGUFValueType
    vocab = spm_vocab.gguf_tokenizer(spm_vocab.train())
    tokens, scores, types = (list(vocab[f"tokenizer.ggml.{k}"][0]) for k in ("tokens", "scores", "token_type"))
    for marker in ("<start_of_turn>", "<end_of_turn>"):
        tokens.append(marker)
        scores.append(0.0)
        types.append(int(gguf.TokenType.CONTROL))
    vocab |= {"tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
              "tokenizer.ggml.scores": (scores, V.ARRAY, V.FLOAT32),
              "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32),
              "tokenizer.ggml.add_space_prefix": (False, V.BOOL)}
    from tiny_llama import write_gguf

    path = write_gguf(tmp_path / "gemma-vocab.gguf", tokenizer=vocab)
    tok = LlamaModel(path, path_mode="numpy").tokenizer
    with Witness(path, "gemma: SentencePiece, no space prefix, turn markers") as witness:
        for text in HARD_TEXTS:
            ids = tok.encode(text)
            assert ids == witness.tokenize(text), text
            assert tok.decode(ids) == witness.detokenize(ids), text
