"""The vocabulary of a GGUF file as every tokenizer kind reads it, and the
interface each kind implements.

`Tokenizer` is what vkq's decoder and commands use: `encode(text)` gives the
ids a model is fed (BOS/EOS where the file's add flags say, as llama.cpp's
`llama_tokenize` with add_special), `decode(ids)` the text back. The kinds
live in their own modules (byte-level BPE in `tokenizer`, SentencePiece in
`spm`); `tokenizer.open_tokenizer(file)` picks one from the file. The readers
below check the tokenizer.ggml.* values every kind shares.
"""
from __future__ import annotations

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
# and texts' ends of the common model families.
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>")
# Fill-in-the-middle tokens that end a generation too: the pad, repository and
# file-separator tokens, from their tokenizer.ggml.fim_*_token_id, else a token
# with one of these texts: the lowest id here (llama.cpp takes the one its hash
# map meets first, so a vocabulary with two of one kind is ambiguous there).
_FIM_EOG = {"pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
            "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
            "sep": ("<|file_sep|>",)}


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
    for which, texts in _FIM_EOG.items():
        ident = token_id(file, f"tokenizer.ggml.fim_{which}_token_id", n)
        if ident is None:
            ident = min((by_text[t] for t in texts if t in by_text), default=None)
        if ident is not None:
            eog.add(ident)
    if eos_id is not None:
        eog.add(eos_id)
    ends = {tokens[i] for i in eog}
    calls = "<|call|>" in ends or "<|calls|>" in ends
    if "<|end|>" in ends and calls and ("<|return|>" in ends or "<|flush|>" in ends):
        eog.discard(by_text["<|end|>"])
    if "</s>" in ends and "<|tool_response>" in ends:
        eog.discard(by_text["</s>"])
    return frozenset(eog)


def flag(file: GGUFFile, key: str, default: bool) -> bool:
    value = metadata(file, key, default)
    if not isinstance(value, bool):
        raise ValueError(f"{file.path.name}: {key} is {value!r}, not a boolean")
    return value


class Tokenizer(ABC):
    """What every tokenizer kind gives: n_vocab, bos_id and eos_id (None when
    the file has none), eog_ids (every token that ends a generation:
    end_of_generation's), add_bos and add_eos (the file's add flags), encode
    and decode. A kind sets those attributes and implements _encode and decode."""

    n_vocab: int
    bos_id: int | None
    eos_id: int | None
    eog_ids: frozenset[int]
    add_bos: bool
    add_eos: bool

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

    @abstractmethod
    def decode(self, ids, skip_special: bool = True, continuation: bool = False) -> str:
        """The text of ids; skip_special leaves out control tokens (BOS, EOS).
        continuation: ids that follow others (a generation after its prompt),
        so a kind that drops the space it prefixed to a text's start keeps it."""
