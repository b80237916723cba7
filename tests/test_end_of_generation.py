"""The tokens that end a generation (vkq.blocks.vocab.end_of_generation).

- The set each tokenizer kind reads from a file equals llama.cpp's
  (libllama's llama_vocab_is_eog over every id), on vocabularies holding
  the end-of-turn texts, look-alikes that end nothing, fill-in-the-middle
  tokens, eot/eom/fim ids in the metadata, and the two families whose
  <|end|> or </s> means otherwise.
- Greedy decoding stops at such a token that is not EOS, on both engines
  and in `vkq generate`, and goes on past it where told to ignore it.
"""
from __future__ import annotations

import gguf
import pytest

import spm_vocab
from llama_vocab import Witness
from tiny_llama import byte_level_vocab, write_gguf
from tiny_qwen import ascii_vocab, write_qwen
from vkq.blocks.gguf_io import open_gguf
from vkq.blocks.tokenizer import open_tokenizer
from vkq.commands.cli import main
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

V = gguf.GGUFValueType
CONTROL, NORMAL = int(gguf.TokenType.CONTROL), int(gguf.TokenType.NORMAL)
# Texts that look like ends and end nothing in llama.cpp.
LOOK_ALIKES = ("<|eot|>", "<|end_of_turn|>", "<|im_start|>", "<|fim_prefix|>", "<|fim_middle|>", "<s>", "<|EOT|>")
FIM = ("<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
# The two families whose end-of-turn texts mean otherwise (all are ends alone).
GPT_OSS = ("<|return|>", "<|call|>", "<|end|>")
SOLAR = ("<|calls|>", "<|flush|>", "<|end|>")
GEMMA = ("<|tool_response>", "</s>")
# The other texts that end a generation in llama.cpp, written out here (not
# vkq's list: a text left out of it is then seen); <|endoftext|> is EOS, the
# first token of the vocabularies below.
ORDINARY = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
            "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>")

def bpe_file(path, extra: tuple[str, ...], metadata: dict | None = None, normal: tuple[str, ...] = ()):
    """tiny_llama's file, its byte-level vocabulary with `extra` tokens after it
    (CONTROL, but those in `normal`), EOS the first token (<|endoftext|>)."""
    tokens, merges, types = byte_level_vocab()
    tokens, types = tokens + list(extra), types + [NORMAL if t in normal else CONTROL for t in extra]
    vocab = {"tokenizer.ggml.model": ("gpt2", V.STRING), "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
             "tokenizer.ggml.merges": (merges, V.ARRAY, V.STRING),
             "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32), "tokenizer.ggml.eos_token_id": 0}
    return write_gguf(path, tokenizer=vocab | (metadata or {}))


N_BPE = len(byte_level_vocab()[0])  # the extra tokens' first id
CASES = {
    # every end text, some typed NORMAL (llama.cpp goes by the text), the FIM ends, look-alikes
    "the texts": dict(extra=(*ORDINARY, *FIM, *LOOK_ALIKES), normal=("<|im_end|>", "<end_of_turn>", "<|repo_name|>")),
    # ends given by id: EOT and EOM at ordinary tokens, the FIM pad by id (its text then ends nothing)
    "the ids": dict(extra=("<a>", "<b>", "<c>", "<|fim_pad|>"), metadata={
        f"tokenizer.ggml.{which}_token_id": (N_BPE + i, V.UINT32) for i, which in enumerate(("eot", "eom", "fim_pad"))}),
    "gpt-oss": dict(extra=GPT_OSS + ("<|endoftext|>x",)),
    "solar": dict(extra=SOLAR),
    "<|end|> alone": dict(extra=("<|end|>", "<|return|>")),
    "gemma": dict(extra=GEMMA + ("<eos>",)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_ends_are_llama_cpps(tmp_path, case):
    path = bpe_file(tmp_path / "v.gguf", **CASES[case])
    tok = open_tokenizer(open_gguf(path))
    with Witness(path, f"end of generation: {case}") as witness:
        want = witness.end_of_generation()
    names = {i: tok.decode([i], skip_special=False) for i in tok.eog_ids ^ want}
    assert tok.eog_ids == want, f"vkq only: {[names[i] for i in tok.eog_ids - want]}, " \
                                f"llama.cpp only: {[names[i] for i in want - tok.eog_ids]}"
    assert 0 in want  # EOS


def test_what_ends_a_generation(tmp_path):
    """Without llama.cpp: the sets the cases above must give, by text."""
    def ends(case):
        path = bpe_file(tmp_path / f"{len(list(tmp_path.iterdir()))}.gguf", **CASES[case])
        tok = open_tokenizer(open_gguf(path))
        return {tok.decode([i], skip_special=False) for i in tok.eog_ids}

    assert ends("the texts") == {"<|endoftext|>", *ORDINARY, *FIM}
    assert ends("the ids") == {"<|endoftext|>", "<a>", "<b>", "<c>"}
    assert ends("gpt-oss") == {"<|endoftext|>", "<|return|>", "<|call|>"}
    assert ends("solar") == {"<|endoftext|>", "<|calls|>", "<|flush|>"}
    assert ends("<|end|> alone") == {"<|endoftext|>", "<|end|>", "<|return|>"}
    assert ends("gemma") == {"<|endoftext|>", "<|tool_response>", "<eos>"}


def test_smollm2_ends_as_in_llama_cpp():
    """A real byte-level BPE vocabulary (SmolLM2's: <|endoftext|>, <|im_end|>, its
    fill-in-the-middle tokens) gives llama.cpp's set."""
    from conftest import SMOLLM2_MISSING, smollm2_path

    path = smollm2_path()
    if path is None:
        pytest.skip(SMOLLM2_MISSING)
    tok = open_tokenizer(open_gguf(path))
    with Witness(path, "SmolLM2-135M-Instruct") as witness:
        assert tok.eog_ids == witness.end_of_generation()
    assert {tok.decode([i], skip_special=False) for i in tok.eog_ids} >= {"<|endoftext|>", "<|im_end|>"}


def test_a_sentencepiece_vocabulary_ends_at_its_eos(tmp_path):
    """</s> (EOS, id 2) and an added <|im_end|>: both end, <s> does not."""
    meta = spm_vocab.gguf_tokenizer(spm_vocab.train())
    tokens, types = meta["tokenizer.ggml.tokens"][0], meta["tokenizer.ggml.token_type"][0]
    vocab = {"tokenizer.ggml.tokens": (tokens + ["<|im_end|>"], V.ARRAY, V.STRING),
             "tokenizer.ggml.token_type": (types + [CONTROL], V.ARRAY, V.INT32),
             "tokenizer.ggml.scores": (meta["tokenizer.ggml.scores"][0] + [0.0], V.ARRAY, V.FLOAT32)}
    path = write_gguf(tmp_path / "spm.gguf", tokenizer=meta | vocab)
    tok = open_tokenizer(open_gguf(path))
    assert tok.eog_ids == {2, len(tokens)}
    with Witness(path, "end of generation: SentencePiece") as witness:
        assert witness.end_of_generation() == tok.eog_ids


# -- greedy decoding stops there -------------------------------------------------------------------

N_TOKENS = 10


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(the tiny qwen2 file, the prompt's ids, its 10 greedy tokens with no stop, the first
    token that is not EOS nor seen before in the run, at a step k >= 2: the end to give)."""
    path = write_qwen(tmp_path_factory.mktemp("eog") / "plain.gguf", "qwen2", scale=2.5)
    model = LlamaModel(path, path_mode="numpy")
    ids = model.tokenizer.encode("the theme")
    tokens = model.greedy(ids, N_TOKENS, stop_at_eos=False).tokens
    k = next(k for k in range(2, N_TOKENS) if tokens[k] not in tokens[:k] and tokens[k] != 0)
    return path, ids, tokens, k


def ended_file(tmp_path, run, how: str):
    """The same model, the run's k-th token made an end: by the file's
    eot_token_id, or by the text <|im_end|> in its place."""
    _, _, tokens, k = run
    end = tokens[k]
    if how == "eot_token_id":
        meta = {"tokenizer.ggml.eot_token_id": (end, V.UINT32)}
    else:
        names = list(ascii_vocab()["tokenizer.ggml.tokens"][0])
        names[end] = "<|im_end|>"
        meta = {"tokenizer.ggml.tokens": (names, V.ARRAY, V.STRING)}
    return write_qwen(tmp_path / f"{how}.gguf", "qwen2", scale=2.5, metadata=meta)


@pytest.mark.parametrize("how", ["eot_token_id", "text"])
def test_greedy_stops_at_an_end_on_both_engines(backend, tmp_path, run, how):
    _, ids, tokens, k = run
    path = ended_file(tmp_path, run, how)
    for model in (LlamaModel(path, path_mode="numpy"), GpuLlama(path, backend), LlamaModel(path, backend)):
        assert tokens[k] in model.tokenizer.eog_ids and 0 in model.tokenizer.eog_ids
        assert model.greedy(ids, N_TOKENS).tokens == tokens[:k + 1], model.label
        assert model.greedy(ids, N_TOKENS, stop_at_eos=False).tokens == tokens, model.label
    assert model.greedy(ids, N_TOKENS, speculative="lookup").tokens == tokens[:k + 1]


def test_vkq_generate_stops_at_an_end(tmp_path, run, capsys):
    """vkq generate (graph engine) prints the text up to the end and no more;
    --ignore-eos all of it."""
    path = ended_file(tmp_path, run, "eot_token_id")
    tok = LlamaModel(path, path_mode="numpy").tokenizer
    _, _, tokens, k = run
    shown = {}
    for flags in ((), ("--ignore-eos",)):
        assert main(["generate", str(path), "-p", "the theme", "-n", str(N_TOKENS), *flags]) == 0
        out = capsys.readouterr()
        shown[flags] = out.out
        n = N_TOKENS if flags else k + 1
        assert f"decode: {n} token{'' if n == 1 else 's'}" in out.err
    assert shown[()] == "the theme" + tok.decode(tokens[:k + 1], continuation=True) + "\n"
    assert shown[("--ignore-eos",)] == "the theme" + tok.decode(tokens, continuation=True) + "\n"
