"""Byte-level BPE (tokenizer.ggml.model "gpt2") as llama.cpp tokenizes it.

The witness is libllama's own tokenizer (tests/llama_vocab.py: its answers
kept as data, checked where libllama runs) on the same file. On a vocabulary trained here (tests/bpe_vocab.py), every
tokenizer.ggml.pre value vkq implements (vkq.blocks.tokenizer.PRE_TOKENIZERS,
the key missing too) tokenizes hard text as llama.cpp does: runs of spaces,
tabs and newlines, digits, CJK, emoji, full-width and other scripts' digits,
contractions in both cases, symbols, control tokens in the text, other
Unicode spaces, combining marks. Where the file has no
tokenizer.ggml.add_bos_token, BOS is added where llama.cpp adds it (the
llama 3 family) and llama.cpp's default ids (11) are taken where the file
names none; a pre value llama.cpp does not know, or one vkq does not
implement, is refused in one line.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

import bpe_vocab
from conftest import assert_model_file_refused
from llama_vocab import Witness
from tiny_llama import write_gguf
from vkq.blocks.gguf_io import open_gguf
from vkq.blocks.tokenizer import PRE_TOKENIZERS, open_tokenizer

V = gguf.GGUFValueType
HARD = ["abc", "The quick brown fox", "  lots   of    spaces\n\n\ttabs\r\n  ", "12345678 1,000 3.14 0.5%",
        "東京都は日本の首都", "🙂🎉 café 👩‍👩‍👧", "don't DON'T I'M we'll You'Ve", "x = a+b <= c^d ~ e|f $g `h`",
        "ＡＢＣ１２３ ١٢٣ Ⅻ ½", "<|begin|>hi<|endoftext|> there<|begin|>", "\u00a0nbsp\u3000ideo\u2003em \u0085",
        "a\u0301e\u0308 combining", "the the  the   the ", "$$$ +++ ... !!! ???", "line1\nline2\r\nline3\n\n\n", ""]


# Beside HARD: the kinds of text a user gives (code, chat markup, numbers in prose).
REAL_TEXTS = ["def add(a, b):\n    return a + b\n\n\nclass X:\n\tpass", "<|im_start|>user\nHi!<|im_end|>\n",
              "In 2024, 3.5% of 1,234,567 people paid $12.99 (or €11,50).", "Ünïcödé — “quotes” … ‘single’ «guillemets»",
              "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم", "    indented\n        more\n", "a\n\nb\r\rc  \n  d",
              "http://example.com/path?q=1&r=2#frag", "I've we're THEY'RE it'S", "1234567890123 ١٢٣٤ 一二三"]


def tokenizer_of(path):
    return open_tokenizer(open_gguf(path))


@pytest.mark.parametrize("pre", [None] + [p for p in PRE_TOKENIZERS if p])
def test_every_pre_tokenizer_is_llama_cpps(tmp_path, pre):
    path = write_gguf(tmp_path / "v.gguf", tokenizer=bpe_vocab.gguf_tokenizer(pre))
    tok = tokenizer_of(path)
    with Witness(path, f"trained BPE: pre {pre}") as witness:
        for text in HARD + REAL_TEXTS:
            assert tok.encode(text) == witness.tokenize(text), (pre, text)


B = (True, V.BOOL), (False, V.BOOL)
BOS_CASES = {  # tokenizer.ggml.* keys (beside the vocabulary's): llama.cpp's defaults where they are missing
    "llama-bpe, no add_bos key": dict(pre="llama-bpe"),
    "llama-bpe, add_bos false": dict(pre="llama-bpe", add_bos_token=B[1]),
    "llama-bpe, a BOS id": dict(pre="llama-bpe", bos_token_id=1),
    "qwen2, no add_bos key": dict(pre="qwen2"),
    "no pre, add_bos true, no BOS id": dict(pre=None, add_bos_token=B[0]),
    "gpt-2, add_bos and add_eos, no ids": dict(pre="gpt-2", add_bos_token=B[0], add_eos_token=B[0], eos_token_id=None),
    "smollm, add_bos true, a BOS id": dict(pre="smollm", add_bos_token=B[0], bos_token_id=1),
}


@pytest.mark.parametrize("case", list(BOS_CASES))
def test_bos_and_eos_are_llama_cpps(tmp_path, case):
    keys = dict(BOS_CASES[case])
    meta = bpe_vocab.gguf_tokenizer(keys.pop("pre"), **keys)
    meta = {k: v for k, v in meta.items() if v is not None}
    path = write_gguf(tmp_path / "v.gguf", tokenizer=meta)
    tok = tokenizer_of(path)
    with Witness(path, f"trained BPE: {case}") as witness:
        assert tok.encode("the quick") == witness.tokenize("the quick")
        assert tok.eog_ids == witness.end_of_generation()


def test_llama3_takes_a_word_that_is_a_token_whole(tmp_path):
    """"abc" is a token no merge reaches: llama.cpp's llama 3 pre-tokenizer
    takes it whole (ignore_merges), GPT-2's merges it as far as it goes;
    BOS, llama.cpp's default id 11, is added for llama 3 without an
    add_bos_token key."""
    tokens, _ = bpe_vocab.train()
    abc = tokens.index("abc")
    llama3 = tokenizer_of(write_gguf(tmp_path / "l3.gguf", tokenizer=bpe_vocab.gguf_tokenizer("llama-bpe")))
    gpt2 = tokenizer_of(write_gguf(tmp_path / "g2.gguf", tokenizer=bpe_vocab.gguf_tokenizer("gpt-2")))
    assert llama3.encode("abc") == [11, abc]
    assert len(gpt2.encode("abc")) > 1 and abc not in gpt2.encode("abc")


@pytest.mark.parametrize("pre, said", [
    ("gpt2", "pre-tokenizer 'gpt2' (tokenizer.ggml.pre) is not supported"),  # llama.cpp's is "gpt-2"
    ("minerva", "pre-tokenizer 'minerva' (tokenizer.ggml.pre) is not supported"),  # llama.cpp's is "minerva-7b"
    ("tekken", "pre-tokenizer 'tekken' (tokenizer.ggml.pre) is not supported"),  # llama.cpp's, not vkq's
    ((3, V.UINT32), "pre-tokenizer 3 (tokenizer.ggml.pre) is not supported"),
])
def test_other_pre_tokenizers_are_refused(tmp_path, capsys, pre, said):
    path = write_gguf(tmp_path / "v.gguf", tokenizer=bpe_vocab.gguf_tokenizer(pre))
    assert_model_file_refused(path, said.replace("(", r"\(").replace(")", r"\)"), capsys)


def test_add_bos_without_a_bos_id_in_a_small_vocabulary_is_refused(tmp_path, capsys):
    """llama.cpp's default BOS id 11 is past a vocabulary of 11 tokens."""
    tokens = ["<|endoftext|>"] + [chr(c) for c in range(ord("a"), ord("a") + 9)] + ["ab"]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
            "tokenizer.ggml.merges": (["a b"], V.ARRAY, V.STRING), "tokenizer.ggml.eos_token_id": 0,
            "tokenizer.ggml.add_bos_token": (True, V.BOOL)}
    assert_model_file_refused(write_gguf(tmp_path / "v.gguf", tokenizer=meta),
                              r"tokenizer\.ggml\.add_bos_token is true, but the file has no "
                              r"tokenizer\.ggml\.bos_token_id", capsys)


@pytest.fixture(scope="module")
def smollm2_vocab():
    """SmolLM2's vocabulary (49,152 tokens, 48,900 merges): (tokens, merges, types)."""
    from conftest import smollm2_or_skip
    from vkq.blocks.gguf_io import metadata

    f = open_gguf(smollm2_or_skip())
    return tuple(metadata(f, f"tokenizer.ggml.{k}") for k in ("tokens", "merges", "token_type"))


# SmolLM2's own pre-tokenizer in the default suite; every other value on its vocabulary: slow
# (about a second each, to build both tokenizers of 49,152 tokens).
@pytest.mark.parametrize("pre", [pytest.param(p, marks=() if p == "smollm" else pytest.mark.slow)
                                 for p in [None] + [p for p in PRE_TOKENIZERS if p]])
def test_a_real_vocabulary_under_every_pre_tokenizer(tmp_path, smollm2_vocab, pre):
    """SmolLM2's vocabulary (its file says "smollm") labelled with each
    value, in a file of the vocabulary alone (no tensors): llama.cpp's token
    ids, and llama.cpp's text decoded from them and from random ids."""
    from conftest import finish_gguf

    tokens, merges, types = smollm2_vocab
    w = gguf.GGUFWriter(str(tmp_path / "vocab.gguf"), "llama")
    for key, value, kind in (("block_count", 1, V.UINT32), ("context_length", 64, V.UINT32),
                             ("embedding_length", 64, V.UINT32), ("feed_forward_length", 64, V.UINT32),
                             ("attention.head_count", 4, V.UINT32)):
        w.add_key_value(f"llama.{key}", value, kind)
    w.add_key_value("llama.attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT32)
    w.add_key_value("tokenizer.ggml.model", "gpt2", V.STRING)
    if pre is not None:
        w.add_key_value("tokenizer.ggml.pre", pre, V.STRING)
    w.add_key_value("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    w.add_key_value("tokenizer.ggml.merges", merges, V.ARRAY, V.STRING)
    w.add_key_value("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32)
    w.add_key_value("tokenizer.ggml.eos_token_id", 2, V.UINT32)
    path = finish_gguf(w, tmp_path / "vocab.gguf")
    tok = tokenizer_of(path)
    rng = np.random.default_rng(0)
    with Witness(path, f"SmolLM2's vocabulary: pre {pre}") as witness:
        for text in HARD + REAL_TEXTS:
            assert tok.encode(text) == witness.tokenize(text), (pre, text)
        # and back: llama_detokenize's text (the spaces cleaned where llama.cpp cleans them for this value)
        for ids in [witness.tokenize(t + " , it 's ok .") for t in HARD + REAL_TEXTS] + [
                [int(i) for i in rng.integers(0, len(tokens), 16)] for _ in range(20)]:
            assert tok.decode(ids) == witness.detokenize(ids), (pre, ids)
            assert tok.decode(ids, skip_special=False) == witness.detokenize(ids, special=True), (pre, ids)

