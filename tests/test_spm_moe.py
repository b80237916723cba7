"""A SentencePiece vocabulary with Mixtral's layout of experts (Mixtral 8x7B's
8 experts, 2 used per token; tiny), quantized by llama.cpp, against
llama.cpp's own greedy decoding of the same file.

The model: tests/tiny_llama.py's dense llama (random, every matrix F32,
SCALE giving the greedy tokens margins) with tests/spm_vocab.py's trained
SentencePiece vocabulary, less its byte tokens past ASCII
(spm_vocab.whole_characters: every token whole UTF-8, as llama-server
needs of the text a random model generates), made a mixture of experts as
tests/moe_model.py makes SmolLM2's: expert 0 the dense FFN, the others
noisy copies, a seeded router. Near copies, as in a trained model's
experts' effect: independent random experts make every routing near-tie
(dozens per run) a jump of the logits that llama.cpp's float32/float16
roundings can take either way. llama.cpp's quantizer writes it as Q4_0 and
Q4_K_M (tests/llama_quant.py; at these widths Q4_K_M's expert stacks are its
fallbacks, Q5_0 and Q8_0). Then, on each file, slow (llama-server's start on
lavapipe):

- the file reads as SentencePiece and Mixtral-layout MoE, its expert stacks
  in the types llama.cpp writes;
- llama-server (its Vulkan backend) decoded the float64 reference's greedy
  tokens up to the reference's first near-tie (its tokens kept as data:
  tests/llama_cpp_reference.py; run again where it runs);
- vkq does too on both engines and both paths, its logits, teacher-forced on
  the reference's tokens, within NMSE 1e-3 of the reference's;
- routing each token to its next-best experts instead would move the logits
  by far more than that (the experts differ enough for the test to see it;
  checked on the Q4_0 file).

The quantized file, the reference's run and llama-server's live tokens are
made once and kept by content (tests/file_cache.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import llama_cpp_reference
import llama_quant
import moe_model
import spm_vocab
from reference_runs import ENGINES_AND_PATHS, assert_next_best_routing_seen, cached_runs, check_decoder, margins
from test_qwen import F32
from tiny_llama import write_gguf
from vkq.blocks.gguf_io import open_gguf
from vkq.blocks.spm import SpmTokenizer
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

pytestmark = [pytest.mark.slow, pytest.mark.skipif(llama_quant.bin_dir() is None, reason=llama_quant.MISSING)]

EXPERTS = (8, 2)  # Mixtral 8x7B's
# The matrices' scale and the prompt: no near-tie in the reference's 10 tokens, the
# smallest top-1 margin 0.41 logits in the Q4_0 file, 0.13 in the Q4_K_M one
# (llama-server's own top-2 log-probabilities give margins within 0.07 of the
# reference's on the Q4_0 file, 2026-11-27).
SCALE = 3.0
PROMPT = "Farmers moved their animals to the ridge"
N_TOKENS = 10
# llama.cpp's file type -> the block types of the expert stacks it writes
FILE_TYPES = {"Q4_0": {"Q4_0"}, "Q4_K_M": {"Q5_0", "Q8_0"}}


def write_source(where):
    """The F16 MoE source llama.cpp quantizes (see the module's note)."""
    vocab = spm_vocab.whole_characters(spm_vocab.gguf_tokenizer(spm_vocab.train()))
    dense = write_gguf(where / "dense.gguf", tokenizer=vocab, expert_types=F32, scale=SCALE)
    return moe_model.write_moe_source(dense, where / "moe-f16.gguf", *EXPERTS)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_source(tmp_path_factory.mktemp("spm-moe"))


@pytest.fixture(scope="module", params=list(FILE_TYPES))
def quantized(request, source):
    """(llama.cpp's file type, the file it wrote)."""
    ftype = request.param
    return ftype, llama_quant.cached_quantize(f"spm-moe-{ftype}", source, ftype)


@pytest.fixture(scope="module")
def runs(quantized):
    """(the float64 reference's run, llama.cpp's greedy tokens), kept by the file's content."""
    want, llama_cpp = cached_runs("test_spm_moe", f"spm-moe-{quantized[0]}", quantized[1], PROMPT, N_TOKENS)
    print(f"{llama_quant.type_summary(quantized[1])}; reference {want.tokens}, llama.cpp {llama_cpp}; "
          f"{want.compared} compared; margins {np.round(margins(want.logits), 2).tolist()}")
    return want, llama_cpp


def test_the_file_is_sentencepiece_and_mixtral_moe(quantized):
    ftype, path = quantized
    model = LlamaModel(path, path_mode="numpy")
    assert isinstance(model.tokenizer, SpmTokenizer)
    cfg = model.file.config
    assert (cfg.arch, cfg.n_expert, cfg.n_expert_used) == ("llama", *EXPERTS)
    tensors = open_gguf(path).tensors
    assert {t.qtype for name, t in tensors.items() if name.endswith("_exps.weight")} == FILE_TYPES[ftype]
    assert {t.qtype for name, t in tensors.items() if name.endswith("ffn_gate_inp.weight")} == {"F32"}


def test_llama_cpp_decodes_the_reference_tokens(runs):
    want, llama_cpp = runs
    assert llama_cpp[:want.compared] == want.tokens[:want.compared]


def test_llama_cpp_still_gives_the_recorded_tokens(quantized, runs):
    llama_cpp_reference.check_live("test_spm_moe", f"spm-moe-{quantized[0]}", quantized[1], runs[0].ids, N_TOKENS,
                                   runs[0].compared)


@pytest.mark.parametrize("engine, path", ENGINES_AND_PATHS)
def test_vkq_matches_llama_cpp(backend, quantized, runs, engine, path):
    want, llama_cpp = runs
    decoder = GpuLlama if engine == "graph" else LlamaModel
    check_decoder(decoder(quantized[1], backend, path), want, llama_cpp)


def test_a_wrong_expert_choice_would_be_seen(quantized, runs, monkeypatch):
    """Each token routed to its next-best experts: the logits move by far more
    than the tests allow."""
    if quantized[0] != "Q4_0":
        pytest.skip("once is enough")
    assert_next_best_routing_seen(quantized[1], runs[0], monkeypatch)
