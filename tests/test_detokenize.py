"""Token ids back to text as llama.cpp gives it.

The witness is libllama (tests/llama_vocab.py) on the same file:
- `decode(ids)`, the whole text, is llama_detokenize's (remove_special
  false; skip_special=False: unparse_special): byte-level BPE under every
  tokenizer.ggml.pre value vkq implements, with the space clean-up llama.cpp
  does for some of them (" ," -> ",", " 's" -> "'s", " ' " -> "'", ...),
  and SentencePiece; on hard text (punctuation after spaces, contractions,
  whitespace runs, CJK, emoji, control tokens) and on random ids.
- Token types as llama.cpp's loader leaves them: a token whose text ends a
  generation, or a fill-in-the-middle token found by its text, is a control
  token whatever the file types it; gpt-oss's <|channel|> family and an
  <|end|> that ends nothing are user-defined (always shown); unused and
  undefined tokens decode to nothing; a user-defined token's text is its
  own (no byte-level decoding); a character outside the byte map decodes
  to llama.cpp's [UNK_BYTE_0x..] marker. The same types cut the text when
  encoding.
- `decode(ids, continuation=True)` is the pieces joined as llama-server
  streams them (llama_token_to_piece, no clean-up): what `generate` returns
  and what its on_text (and `vkq generate`) shows, piece by piece, the
  whole of it even where the generation ends inside a UTF-8 character.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import bpe_vocab
import spm_vocab
from llama_vocab import Witness
from tiny_llama import write_gguf
from vkq.blocks.gguf_io import open_gguf
from vkq.blocks.tokenizer import PRE_TOKENIZERS, open_tokenizer

V, T = gguf.GGUFValueType, gguf.TokenType

# Text that llama.cpp's clean-up changes, and text around it that it leaves.
CLEAN_TEXTS = ["Hello , world . Is it ? Yes ! ok ,", " , at the start", "x  ,y   . z ,, ..", "a ' b ' ' c ''",
               " ' ", "it 's he 'm we 're you 've I 'd they 'll don 't", "IT 'S I 'M 'Re", "end 's", "' s ' m",
               "trailing '", "the 're 've", "  'll  'd  's", "a '\tb", "naïve , café . 日本 , 🙂 !"]
HARD = ["The quick brown fox's 12345", "  lots   of    spaces\n\n\ttabs\r\n  ", "東京都は日本の首都です。",
        "🙂🎉 café 👩‍👩‍👧", "don't DON'T I'M we'll You'Ve", "<|begin|>hi<|endoftext|> there<|begin|> , .",
        "x = a+b <= c^d ~ e|f $g `h`", "  ", ""]
TEXTS = CLEAN_TEXTS + HARD

# Tokens added to a vocabulary with the file's type for each, as llama.cpp's loader takes them.
EXTRA = [("<|im_end|>", T.NORMAL),  # ends a generation by its text: a control token
         ("<|fim_prefix|>", T.USER_DEFINED), ("<|fim_pad|>", T.NORMAL),  # fill-in-the-middle by text: control
         ("<|channel|>", T.CONTROL), ("<|start|>", T.NORMAL),  # gpt-oss's: user-defined, always shown
         ("<|end|>", T.CONTROL), ("<|return|>", T.CONTROL), ("<|call|>", T.CONTROL),  # <|end|> ends nothing
         ("</s>", T.CONTROL), ("<|tool_response>", T.CONTROL),  # gemma 4's: </s> a normal token
         ("[e~[", T.NORMAL), ("<｜end▁of▁sentence｜>", T.USER_DEFINED),  # ends of generation: control
         ("<unk>", T.UNKNOWN), ("<|unused_0|>", T.UNUSED), ("<undefined>", 0), ("<seven>", 7),
         ("日本", T.NORMAL), ("Ġuser ,", T.USER_DEFINED), (" ,spaced", T.USER_DEFINED)]
EXTRA_TEXTS = ["a<|im_end|>b<|fim_prefix|> c<|channel|>d<|start|><unk>e<|unused_0|>", "x<|end|> ,y</s>z",
               "[e~[ ,<｜end▁of▁sentence｜>'s <|fim_pad|><|return|><|call|><|tool_response>", "Ġuser , ,spaced 's",
               "<undefined><seven> 日本"]


def with_extra(meta: dict, extra=EXTRA, byte_token: bool = True) -> dict:
    """tokenizer.ggml.* metadata with `extra` tokens after its own (those it
    does not hold; and "<0x41>" typed as a byte token: llama.cpp reads its hex)."""
    tokens, types = meta["tokenizer.ggml.tokens"][0], meta["tokenizer.ggml.token_type"][0]
    extra = [(t, k) for t, k in extra if t not in tokens] + ([("<0x41>", T.BYTE)] if byte_token else [])
    out = dict(meta)
    out["tokenizer.ggml.tokens"] = (tokens + [t for t, _ in extra], V.ARRAY, V.STRING)
    out["tokenizer.ggml.token_type"] = (list(types) + [int(k) for _, k in extra], V.ARRAY, V.INT32)
    if "tokenizer.ggml.scores" in meta:
        out["tokenizer.ggml.scores"] = (meta["tokenizer.ggml.scores"][0] + [0.0] * len(extra), V.ARRAY, V.FLOAT32)
    return out


def random_ids(n_vocab: int, seed: int, n: int = 40) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(i) for i in rng.integers(0, n_vocab, int(rng.integers(1, 24)))] for _ in range(n)]


def assert_text_is_llama_cpps(path, texts, label: str) -> None:
    """Every text's ids (llama.cpp's) and random ids decode to llama.cpp's text,
    whole and as pieces; the text encodes to llama.cpp's ids; the same tokens
    end a generation."""
    tok = open_tokenizer(open_gguf(path))
    with Witness(path, label) as witness:
        assert tok.eog_ids == witness.end_of_generation()
        cases = [witness.tokenize(t) for t in texts] + random_ids(tok.n_vocab, len(texts))
        for text, ids in zip(texts, cases):
            assert tok.encode(text) == ids, text
        for ids in cases:
            assert tok.decode(ids) == witness.detokenize(ids), ids
            assert tok.decode(ids, skip_special=False) == witness.detokenize(ids, special=True), ids
            streamed = b"".join(witness.piece(i) for i in ids).decode("utf-8", errors="replace")
            assert tok.decode(ids, continuation=True) == streamed, ids


# One value that cleans spaces and one that does not in the default suite; the rest slow.
FAST_PRE = ("gpt-2", "qwen2")


@pytest.mark.parametrize("pre", [pytest.param(p, marks=() if p in FAST_PRE else pytest.mark.slow)
                                 for p in [None] + [p for p in PRE_TOKENIZERS if p]])
def test_bpe_text_is_llama_detokenize(tmp_path, pre):
    path = write_gguf(tmp_path / "v.gguf", tokenizer=with_extra(bpe_vocab.gguf_tokenizer(pre)))
    assert_text_is_llama_cpps(path, TEXTS + EXTRA_TEXTS, f"detokenize: BPE pre {pre}")


def test_bpe_space_prefix_key(tmp_path):
    """tokenizer.ggml.add_space_prefix on a byte-level BPE file: llama.cpp
    encodes as without it and takes the first space off the decoded text."""
    meta = with_extra(bpe_vocab.gguf_tokenizer("llama-bpe", add_space_prefix=(True, V.BOOL)))
    assert_text_is_llama_cpps(write_gguf(tmp_path / "v.gguf", tokenizer=meta), TEXTS[:6] + EXTRA_TEXTS[:2],
                              "detokenize: BPE space prefix")


def test_sentencepiece_text_is_llama_detokenize(tmp_path):
    """The trained SentencePiece vocabulary with the same added tokens (byte
    tokens of its own): llama.cpp's types and text."""
    meta = with_extra(spm_vocab.gguf_tokenizer(spm_vocab.train()), byte_token=False)
    assert_text_is_llama_cpps(write_gguf(tmp_path / "spm.gguf", tokenizer=meta), TEXTS + EXTRA_TEXTS,
                              "detokenize: SentencePiece")


def test_what_the_clean_up_does(tmp_path):
    """Without llama.cpp: GPT-2's pre-tokenizer cleans spaces, qwen2's does not;
    a continuation is never cleaned."""
    def tok(pre):
        path = write_gguf(tmp_path / f"{pre}.gguf", tokenizer=with_extra(bpe_vocab.gguf_tokenizer(pre)))
        return open_tokenizer(open_gguf(path))

    text = "Hi , you . It 's a ' b ' ok 't 'll ?"
    gpt2, qwen2 = tok("gpt-2"), tok("qwen2")
    ids = gpt2.encode(text)
    assert gpt2.decode(ids) == "Hi, you. It's a'b'ok 't 'll?"
    assert gpt2.decode(ids, continuation=True) == text == qwen2.decode(qwen2.encode(text))
    # types: <|im_end|> (typed normal) hidden; <|channel|> (typed control), <|end|> and </s> shown
    assert gpt2.decode(gpt2.encode("a<|im_end|>b<|channel|>c<|end|>d</s>e")) == "ab<|channel|>c<|end|>d</s>e"
    tokens = with_extra(bpe_vocab.gguf_tokenizer("gpt-2"))["tokenizer.ggml.tokens"][0]
    unused, undefined, user, ja, byte = (tokens.index(t)
                                         for t in ("<|unused_0|>", "<seven>", "Ġuser ,", "日本", "<0x41>"))
    assert gpt2.decode([unused, undefined], skip_special=False) == ""
    assert gpt2.decode([user, ja, byte]) == "Ġuser,[UNK_BYTE_0xe697a5日本][UNK_BYTE_0xe69cac日本]A"


def test_a_byte_token_that_is_no_hex_byte_is_refused(tmp_path, capsys):
    from conftest import assert_model_file_refused

    meta = with_extra(bpe_vocab.gguf_tokenizer("gpt-2"), extra=[("<0xZZ>", T.BYTE)], byte_token=False)
    n = len(meta["tokenizer.ggml.tokens"][0]) - 1
    assert_model_file_refused(write_gguf(tmp_path / "v.gguf", tokenizer=meta),
                              rf"token {n} \('<0xZZ>'\) has the byte type but is no <0xXX>", capsys)


# -- generate: the text streamed is the text returned -------------------------------------------------

def fake_greedy(tokens):
    """A Decoder.greedy that 'chooses' the given tokens: generate's text, not the model, is under test."""
    from vkq.llama.decoding import Generation, GenerationStats

    def greedy(self, prompt_ids, n_tokens, *, on_token=None, **_):
        chosen = tokens[:n_tokens]
        for t in chosen:
            if on_token is not None:
                on_token(t)
        return Generation(list(chosen), GenerationStats("fake", None, n_prompt=len(prompt_ids),
                                                        n_generated=len(chosen)))
    return greedy


@pytest.mark.parametrize("cut", [0, 1, 2], ids=["ends in a whole character", "ends inside one", "ends two bytes in"])
def test_generate_streams_its_whole_text(tmp_path, monkeypatch, capsys, cut):
    """generate's on_text pieces joined, the text it returns and what `vkq
    generate` prints after the prompt are the pieces llama-server streams for
    the tokens (no clean-up of " ," or " 's"), even where the generation
    ends inside a UTF-8 character (its bytes shown as U+FFFD)."""
    from vkq.commands.cli import main
    from vkq.llama.decoding import Decoder
    from vkq.llama.host import LlamaModel

    path = write_gguf(tmp_path / "m.gguf", tokenizer=with_extra(bpe_vocab.gguf_tokenizer("gpt-2")))
    model = LlamaModel(path, path_mode="numpy")
    tok = model.tokenizer
    with Witness(path, "detokenize: streamed") as witness:
        tokens = witness.tokenize("Hi , you . It 's <|im_end|>日本", add_special=False)
        tokens += witness.tokenize("鯨", add_special=False)[:cut] if cut else []
        want = b"".join(witness.piece(i) for i in tokens).decode("utf-8", errors="replace")
    assert (want.endswith("\ufffd") == bool(cut)) and " , you" in want
    monkeypatch.setattr(Decoder, "greedy", fake_greedy(tokens))
    shown = []
    text, ids, _ = model.generate("x", len(tokens), on_text=shown.append)
    assert ids == tokens and text == "".join(shown) == want == tok.decode(tokens, continuation=True)
    assert main(["generate", str(path), "-p", "x", "-n", str(len(tokens)), "--path", "numpy"]) == 0
    assert capsys.readouterr().out == "x" + want + "\n"
