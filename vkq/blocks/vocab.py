"""The vocabulary of a GGUF file as every tokenizer kind reads it, and the
interface each kind implements.

`Tokenizer` is what vkq's decoder and commands use: `encode(text)` gives the
ids a model is fed (BOS/EOS where the file's add flags say, as llama.cpp's
`llama_tokenize` with add_special), `decode(ids)` the text back (as
`llama_detokenize`). The kinds live in their own modules (byte-level BPE in
`tokenizer`, SentencePiece in `spm`); `tokenizer.open_tokenizer(file)` picks
one from the file. The readers below check the tokenizer.ggml.* values
every kind shares, and read the token types as llama.cpp leaves them.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod

from ..checks import described, is_int, token_ids_argument
from .gguf_io import GGUFFile, metadata

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type, gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def token_strings(file: GGUFFile, key: str = "tokenizer.ggml.tokens") -> list[str]:
    value = metadata(file, key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{file.path.name}: {key} is not a list of strings")
    return value


def token_types(file: GGUFFile, n_vocab: int) -> list[int]:
    """tokenizer.ggml.token_type, one per token (NORMAL for all when the file has none)."""
    types = metadata(file, "tokenizer.ggml.token_type", [NORMAL] * n_vocab)
    if not isinstance(types, list) or len(types) != n_vocab or not all(is_int(t) for t in types):
        raise ValueError(f"{file.path.name}: tokenizer.ggml.token_type is not an integer per token")
    return types


def token_id(file: GGUFFile, key: str, n_vocab: int, default: int | None = None) -> int | None:
    """A special token's id (tokenizer.ggml.bos_token_id, ...); default when the key is absent."""
    value = metadata(file, key, None)
    if value is None:
        return default if default is not None and default < n_vocab else None
    if not (is_int(value) and 0 <= value < n_vocab):
        raise ValueError(f"{file.path.name}: {key} is {value!r}, not a token id in [0, {n_vocab})")
    return value


# The texts that make a token end a generation whatever its type or id, as
# llama.cpp's vocabulary loader lists them (llama_vocab_is_eog): chat turns'
# and texts' ends of the common model families. It makes each a control token.
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[")
# Fill-in-the-middle tokens, as llama.cpp's loader finds them: from their keys
# (tokenizer.ggml.<key>_token_id, the first of those the file has, newer first),
# else a token with one of the texts: the lowest id here (llama.cpp takes the one
# its hash map meets first, so a vocabulary with two of one kind is ambiguous
# there), which it makes a control token. The pad, repository and file-separator
# tokens end a generation.
_FIM = {"pre": (("fim_pre", "prefix"), ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                        "<\uff5cfim\u2581begin\uff5c>", "<PRE>", "\u2581<PRE>", "<|code_prefix|>",
                                        "<|prefix|>")),
        "suf": (("fim_suf", "suffix"), ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                        "<\uff5cfim\u2581hole\uff5c>", "<SUF>", "\u2581<SUF>", "<|code_suffix|>",
                                        "<|suffix|>")),
        "mid": (("fim_mid", "middle"), ("<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                        "<\uff5cfim\u2581end\uff5c>", "<MID>", "\u2581<MID>", "<|code_middle|>",
                                        "<|middle|>")),
        "pad": (("fim_pad",), ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
        "rep": (("fim_rep",), ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
        "sep": (("fim_sep",), ("<|file_sep|>",))}
_FIM_EOG = ("pad", "rep", "sep")
# gpt-oss's message markup, which llama.cpp's loader makes user-defined (shown in any text).
_ALWAYS_SHOWN = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


def _fim_tokens(file: GGUFFile, tokens: list[str], by_text: dict[str, int]) -> dict[str, tuple[int, bool]]:
    """{kind: (id, found by its text)} of the fill-in-the-middle tokens the vocabulary has (_FIM)."""
    found = {}
    for which, (keys, texts) in _FIM.items():
        named = [token_id(file, f"tokenizer.ggml.{key}_token_id", len(tokens)) for key in keys]
        ident = next((i for i in named if i is not None), None)
        if ident is not None:
            found[which] = ident, False
        elif any(t in by_text for t in texts):
            found[which] = min(by_text[t] for t in texts if t in by_text), True
    return found


def end_of_generation(file: GGUFFile, tokens: list[str], eos_id: int | None) -> frozenset[int]:
    """The ids that end a generation, as llama.cpp's llama_vocab_is_eog
    takes them: eos_id, the file's tokenizer.ggml.eot_token_id and
    eom_token_id, the fill-in-the-middle pad/repository/separator tokens,
    and every token whose text is one of EOG_TEXTS. Two families' texts
    mean otherwise, as llama.cpp has them: with <|return|> and <|call|> (or
    <|calls|> and <|flush|>) in the vocabulary, <|end|> ends a message, not
    the generation; with <|tool_response>, </s> is no end."""
    n = len(tokens)
    by_text = {t: i for i, t in enumerate(tokens)}  # a text twice: its last id, as llama.cpp's map keeps it
    eog = {by_text[t] for t in EOG_TEXTS if t in by_text}
    for which in ("eot", "eom"):
        ident = token_id(file, f"tokenizer.ggml.{which}_token_id", n)
        if ident is not None:
            eog.add(ident)
    eog |= {ident for which, (ident, _) in _fim_tokens(file, tokens, by_text).items() if which in _FIM_EOG}
    if eos_id is not None:
        eog.add(eos_id)
    ends = {tokens[i] for i in eog}
    calls = "<|call|>" in ends or "<|calls|>" in ends
    if "<|end|>" in ends and calls and ("<|return|>" in ends or "<|flush|>" in ends):
        eog.discard(by_text["<|end|>"])
    if "</s>" in ends and "<|tool_response>" in ends:
        eog.discard(by_text["</s>"])
    return frozenset(eog)


def token_kinds(file: GGUFFile, tokens: list[str], types: list[int], eog_ids: frozenset[int]) -> list[int]:
    """Each token's type as llama.cpp's vocabulary loader leaves it, which
    its tokenizer (the tokens cut out of a text whole) and detokenizer (the
    tokens shown only with special) go by: tokenizer.ggml.token_type, but
    - a token whose text ends a generation (EOG_TEXTS) and a
      fill-in-the-middle token found by its text are control tokens;
    - gpt-oss's markup tokens (_ALWAYS_SHOWN) are user-defined;
    - the ends that end nothing in their family (end_of_generation's: they
      are not in eog_ids) are <|end|> user-defined, </s> normal."""
    by_text = {t: i for i, t in enumerate(tokens)}
    kinds = list(types)
    control = {by_text[t] for t in EOG_TEXTS if t in by_text}
    control |= {ident for ident, by_its_text in _fim_tokens(file, tokens, by_text).values() if by_its_text}
    for i in control:
        kinds[i] = CONTROL
    for t in _ALWAYS_SHOWN:
        if t in by_text:
            kinds[by_text[t]] = USER_DEFINED
    for text, kind in (("<|end|>", USER_DEFINED), ("</s>", NORMAL)):
        if text in by_text and by_text[text] not in eog_ids:
            kinds[by_text[text]] = kind
    return kinds


def clean_up_spaces(text: bytes) -> bytes:
    """llama.cpp's clean-up of a detokenized text (its clean_spaces, after
    HF's clean_up_tokenization_spaces), in its three passes: no space before
    ? ! . or ,; a lone apostrophe between spaces loses both; no space before
    the contractions 's 'm 're 've (llama.cpp keeps the one before 't 'd 'll)."""
    text = re.sub(rb" ([?!.,])", rb"\1", text)
    text = text.replace(b" ' ", b"'")
    return re.sub(rb" '(?=s|m|re|ve)", b"'", text)


_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def byte_of_token(name: str, ident: int, text: str) -> int:
    """The byte a byte token (type BYTE) stands for: its <0xXX> text's hex,
    as llama.cpp reads it; a byte token of another text is refused."""
    if not _BYTE_TOKEN.fullmatch(text):
        raise ValueError(f"{name}: token {ident} ({text!r}) has the byte type but is no <0xXX>")
    return int(text[3:5], 16)


def flag(file: GGUFFile, key: str, default: bool) -> bool:
    value = metadata(file, key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{file.path.name}: {key} is {value!r}, not a boolean")
    return value


class Tokenizer(ABC):
    """What every tokenizer kind gives: n_vocab, bos_id and eos_id (None when
    the file has none), eog_ids (every token that ends a generation:
    end_of_generation's), add_bos and add_eos (the file's add flags), encode
    and decode. A kind sets those attributes and the ones decode reads
    (kinds: token_kinds'; pieces: each token's bytes, as llama.cpp's
    llama_token_to_piece gives them with special; add_space_prefix;
    clean_spaces), and implements _encode."""

    n_vocab: int
    bos_id: int | None
    eos_id: int | None
    eog_ids: frozenset[int]
    add_bos: bool
    add_eos: bool
    kinds: list[int]
    pieces: list[bytes]
    add_space_prefix: bool  # decode takes a space off the first piece (SentencePiece's encoder put it there)
    clean_spaces: bool  # decode takes out llama.cpp's spaces before punctuation (clean_up_spaces)

    def _check_special(self, name: str) -> None:
        for which, ident in (("bos", self.bos_id), ("eos", self.eos_id)):
            if getattr(self, f"add_{which}") and ident is None:  # llama.cpp refuses such a file too
                raise ValueError(f"{name}: tokenizer.ggml.add_{which}_token is true, "
                                 f"but the file has no tokenizer.ggml.{which}_token_id")

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """The ids of text; with add_special, BOS first and EOS last where the
        file's add flags say."""
        if not isinstance(text, str):
            raise TypeError(f"text is {described(text)}; expected a str")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates: bytes of another encoding on a UTF-8 command line
            raise ValueError(f"the prompt is not valid UTF-8 (character {e.start}: {text[e.start]!r}); "
                             "give it in UTF-8") from None
        ids = self._encode(text)
        if add_special and self.add_bos:
            ids = [self.bos_id] + ids
        if add_special and self.add_eos:
            ids = ids + [self.eos_id]
        return ids

    @abstractmethod
    def _encode(self, text: str) -> list[int]:
        """The ids of text, without BOS/EOS."""

    def check_decode(self, ids) -> list[int]:
        """ids as a list of ints for decode: each a token id of this vocabulary."""
        ids = token_ids_argument("ids", ids)
        bad = next((i for i in ids if not 0 <= i < self.n_vocab), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is not in the vocabulary [0, {self.n_vocab})")
        return ids

    def decode(self, ids, skip_special: bool = True, continuation: bool = False) -> str:
        """The text of ids as llama.cpp's llama_detokenize gives it
        (remove_special false; unparse_special: not skip_special): each
        token's piece, control and unknown tokens' text only where
        skip_special is false; the first piece without a space where the
        encoder prefixes one (add_space_prefix); then, for the vocabularies
        llama.cpp cleans (clean_spaces), clean_up_spaces. Invalid UTF-8 (a
        character cut between tokens) reads U+FFFD.
        continuation: ids that follow others (a generation after its
        prompt): the pieces joined as they are, no space taken off and no
        clean-up: the text llama-server streams (and returns) for them."""
        out = []
        strip = self.add_space_prefix and not continuation
        for i in self.check_decode(ids):
            piece = b"" if skip_special and self.kinds[i] in (CONTROL, UNKNOWN) else self.pieces[i]
            if strip and piece.startswith(b" "):  # (even a control token's text, as llama.cpp's)
                piece = piece[1:]
            strip = False
            out.append(piece)
        text = b"".join(out)
        if self.clean_spaces and not continuation:
            text = clean_up_spaces(text)
        return text.decode("utf-8", errors="replace")
