"""SentencePiece tokenization (tokenizer.ggml.model "llama") against llama.cpp's own tokenizer.

A small vocabulary trained here (tests/spm_vocab.py) goes into tiny llama
files as llama.cpp's converter writes one, in variants of the add flags and
scores; libllama (tests/llama_vocab.py) loads each file's vocabulary and is
the witness: vkq's ids equal llama_tokenize's (add_special, parse_special),
its text llama_detokenize's, at spaces, digits, newlines, characters outside
the vocabulary (byte fallback), special tokens in the text, empty and long
inputs. The same on Mistral's real vocabularies where the mistral-common
package (which ships them) is installed. And vkq generate runs on such a
file, dense and with Mixtral's experts.
"""
from __future__ import annotations

import numpy as np
import pytest
import gguf

import spm_vocab
from llama_vocab import Witness
from tiny_llama import write_gguf
from vkq.blocks.gguf_io import open_gguf
from vkq.blocks.spm import SpmTokenizer
from vkq.blocks.tokenizer import open_tokenizer
from vkq.commands.cli import main
from vkq.llama.host import LlamaModel

BOOL = gguf.GGUFValueType.BOOL


def _long_text() -> str:
    """5000 characters drawn from words of the vocabulary, spaces, digits, newlines and
    characters it does not have."""
    rng = np.random.default_rng(0)
    alphabet = ["the ", "river ", "  ", " ", "\n", "7", "42 ", "ü", "日本", "🙂", "Farmers", ", ", "<sep>", "x"]
    return "".join(rng.choice(alphabet, 1200))[:5000]


TEXTS = {
    "empty": "", "one space": " ", "spaces only": "   ", "word": "Hello", "two words": "Hello world",
    "leading space": " Hello", "leading spaces": "   the river", "trailing spaces": "the river  ",
    "inner spaces": "the  river   rose", "digits": "In 1969, 12 * 12 = 144 and 7:45", "newlines": "a\nb\n\nc\n",
    "indented code": "def f(x):\n    return x\n", "outside the vocabulary": "café ü 日本語 🙂 Ωmega",
    "control tokens in the text": "<s>hi</s> there", "user-defined tokens": "left<sep>right<sep>!end",
    "<unk>": "x <unk> y", "overlapping user-defined tokens": "x日~~~y",
    "long": _long_text(),
}

# The add flags and scores of each file (metadata over spm_vocab.gguf_tokenizer's).
VARIANTS = {
    "as converted": {},
    "no space prefix": {"tokenizer.ggml.add_space_prefix": (False, BOOL)},
    "eos, no bos": {"tokenizer.ggml.add_bos_token": (False, BOOL), "tokenizer.ggml.add_eos_token": (True, BOOL)},
    "no scores": None,  # every pair ties: the leftmost merges first
}


@pytest.fixture(scope="session")
def spm_metadata() -> dict:
    return spm_vocab.gguf_tokenizer(spm_vocab.train())


@pytest.fixture(scope="session")
def spm_files(tmp_path_factory, spm_metadata) -> dict:
    """variant -> a tiny llama file with the trained vocabulary."""
    where = tmp_path_factory.mktemp("spm")
    files = {}
    for i, (name, extra) in enumerate(VARIANTS.items()):
        tokenizer = dict(spm_metadata)
        if extra is None:
            del tokenizer["tokenizer.ggml.scores"]
        files[name] = write_gguf(where / f"spm{i}.gguf", tokenizer=tokenizer | (extra or {}))
    return files


def same(got, want, what: str) -> None:
    """got == want, or a failure naming the first difference (pytest's own diff of
    two long lists takes minutes)."""
    if got != want:
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        pytest.fail(f"{what}: vkq and llama.cpp differ at {at} of {len(got)}/{len(want)}: "
                    f"{got[max(at - 3, 0):at + 5]!r} vs {want[max(at - 3, 0):at + 5]!r}")


def spm(path) -> SpmTokenizer:
    tok = open_tokenizer(open_gguf(path))
    assert isinstance(tok, SpmTokenizer)
    return tok


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ids_and_text_equal_llama_cpp(spm_files, variant):
    tok = spm(spm_files[variant])
    with Witness(spm_files[variant], f"SentencePiece: {variant}") as ref:
        for what, text in TEXTS.items():
            ids = ref.tokenize(text)
            same(tok.encode(text), ids, what)
            same(tok.encode(text, add_special=False), ref.tokenize(text, add_special=False), what)
            same(tok.decode(ids), ref.detokenize(ids), what)
            same(tok.decode(ids, skip_special=False), ref.detokenize(ids, special=True), what)
            # a continuation: each token's piece as llama-server streams it, no space taken off
            same(tok.decode(ids, continuation=True), b"".join(ref.piece(i) for i in ids).decode(errors="replace"),
                 what)


REAL_TEXTS = {
    "instructions": "[INST] What is 2+2? [/INST] 4</s>[INST] and\n\n  more [/INST]",
    "control tokens": "[control_8]x[TOOL_CALLS]  y",
    "scripts": "Hello, World! It's 3.14159 — naïve café, Ελληνικά, русский, 中文, 😀👍🏽\t tab\r\n",
    "code": "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if i else [])
                                  for i, name in enumerate(spm_vocab.MISTRAL_MODELS)])
def test_real_vocabularies_equal_llama_cpp(tmp_path, name):
    """Mistral's own SentencePiece vocabularies (Mistral 7B v0.1's is made as Llama 2's):
    ids and text as llama.cpp's, at every text above and a few of instructions, control
    tokens, scripts and code; the tokens that end a generation as llama.cpp's."""
    model = spm_vocab.mistral_models().get(name)
    if model is None:
        pytest.skip(f"{name}: the mistral-common package, which ships it, is not installed")
    path = write_gguf(tmp_path / "real.gguf", tokenizer=spm_vocab.gguf_tokenizer(spm_vocab.load(model)))
    tok = spm(path)
    with Witness(path, f"Mistral: {name}") as ref:
        assert tok.eog_ids == ref.end_of_generation()
        for what, text in (TEXTS | REAL_TEXTS).items():
            ids = ref.tokenize(text)
            same(tok.encode(text), ids, what)
            same(tok.decode(ids), ref.detokenize(ids), what)
            same(tok.decode(ids, skip_special=False), ref.detokenize(ids, special=True), what)


def test_what_the_vocabulary_gives(spm_files):
    """The converted file's flags and the byte fallback, independent of llama.cpp."""
    tok = spm(spm_files["as converted"])
    assert (tok.bos_id, tok.eos_id, tok.add_bos, tok.add_eos, tok.add_space_prefix) == (1, 2, True, False, True)
    assert tok.encode("") == [1] and tok.encode("", add_special=False) == []
    ids = tok.encode("日", add_special=False)  # not in the vocabulary: '▁' then its three UTF-8 bytes
    assert [tok.tokens[i] for i in ids] == ["▁", "<0xE6>", "<0x97>", "<0xA5>"]
    # a user-defined token is cut out whole, and the text after it gets the space prefix too (as llama.cpp's)
    ids = tok.encode("left<sep>right", add_special=False)
    assert tok.ids["<sep>"] in ids and tok.decode(ids) == "left<sep> right"
    for text in TEXTS.values():  # the text back, the space prefix taken off (no special tokens in it)
        if not any(tok.tokens[i] in text for i in tok.special):
            assert tok.decode(tok.encode(text, add_special=False)) == text


def test_unmatched_bytes_and_bad_vocabularies_are_named(tmp_path, spm_metadata):
    tokens, types = list(spm_metadata["tokenizer.ggml.tokens"][0]), list(spm_metadata["tokenizer.ggml.token_type"][0])
    S, V, I32 = gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32

    def tokenizer(tokens=tokens, types=types):
        vocab = {"tokenizer.ggml.tokens": (tokens, V, S), "tokenizer.ggml.token_type": (types, V, I32)}
        return open_tokenizer(open_gguf(write_gguf(tmp_path / "v.gguf", tokenizer=spm_metadata | vocab)))

    no_bytes = [t if ty != gguf.TokenType.BYTE else f"b{i}" for i, (t, ty) in enumerate(zip(tokens, types))]
    no_byte_types = [ty if ty != gguf.TokenType.BYTE else int(gguf.TokenType.NORMAL) for ty in types]
    with pytest.raises(ValueError, match=r"'日' is not in the vocabulary, and it has no byte token <0xE6>"):
        tokenizer(no_bytes, no_byte_types).encode("日")
    first = types.index(gguf.TokenType.BYTE)
    with pytest.raises(ValueError, match=rf"v\.gguf: token {first} \('b{first}'\) has the byte type but is no <0xXX>"):
        tokenizer(no_bytes)
    with pytest.raises(ValueError, match=r"token '<s>' is in the vocabulary twice \(ids 1 and 5\)"):
        tokenizer(tokens[:5] + ["<s>"] + tokens[6:])
    with pytest.raises(ValueError, match=r"tokenizer model 'bert' is not supported"):
        open_tokenizer(open_gguf(write_gguf(tmp_path / "b.gguf", tokenizer=spm_metadata | {
            "tokenizer.ggml.model": ("bert", S)})))


@pytest.mark.parametrize("experts", [None, (4, 2)], ids=["dense", "Mixtral-layout MoE"])
def test_generate_runs_on_a_sentencepiece_model(tmp_path, spm_metadata, capsys, experts):
    """vkq generate on a tiny llama with the SentencePiece vocabulary, dense and
    with Mixtral's experts: the prompt in, greedy tokens out, their text decoded
    after the prompt."""
    path = write_gguf(tmp_path / "spm.gguf", tokenizer=spm_metadata, experts=experts)
    model = LlamaModel(path, path_mode="numpy")
    text, ids, _ = model.generate("the river", 6, stop_at_eos=False)
    assert len(ids) == 6 and text == model.tokenizer.decode(ids, continuation=True)
    for engine in ("numpy", "graph"):
        args = ["--path", "numpy"] if engine == "numpy" else []
        assert main(["generate", str(path), "-p", "the river", "-n", "6", "--ignore-eos", *args]) == 0
        shown = capsys.readouterr().out[:-1]  # the prompt, the text as it came, a newline
        assert shown.startswith("the river")
        if engine == "numpy":  # the reference's text, all of it (a tail of random bytes that makes no
            # character too, as U+FFFD)
            assert shown == "the river" + text


def test_a_long_race_prompt_has_one_bos(spm_files):
    """vkq race repeats its text to the length asked: BOS at the start only."""
    from vkq.commands.race import prompt_ids

    tok = spm(spm_files["as converted"])
    ids = prompt_ids(tok, 1000)
    assert len(ids) == 1000 and ids[0] == tok.bos_id and ids.count(tok.bos_id) == 1
