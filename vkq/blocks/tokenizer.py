"""The tokenizer stored in a GGUF file: `open_tokenizer(file)`.

Byte-level BPE (tokenizer.ggml.model == "gpt2"), here: encoding built with
the HF `tokenizers` library from the file's vocabulary and merges, with the
pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre`; decoding as
llama.cpp's (each token's characters back to the bytes GPT-2's byte-level
alphabet maps them to, spaces cleaned for the pre values llama.cpp cleans).
SentencePiece ("llama") in `spm`. Both implement `vocab.Tokenizer`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .gguf_io import GGUFFile, metadata
from .spm import SpmTokenizer
from .vocab import (BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, Tokenizer, byte_of_token, end_of_generation, flag,
                    token_id, token_kinds, token_strings, token_types)

# llama.cpp's pre-tokenizer regexes (its llm_tokenizer_bpe, by tokenizer.ggml.pre): each
# splits the pieces the one before it left, keeping matches and the text between
# them as pieces; each piece is then merged on its own.
_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_REGEX = _LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")  # llama 3's, but digits one by one
# o200k's (GPT-4o's: Phi-4-mini's and gpt-oss's vocabularies): a word's capitals and then its small letters
# (with a contraction), digits three at a time, punctuation with the newlines or slashes after it.
_CASED = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_UNCASED = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O_REGEX = (rf"[^\r\n\p{{L}}\p{{N}}]?{_CASED}*{_UNCASED}+{_CONTRACTION}"
                rf"|[^\r\n\p{{L}}\p{{N}}]?{_CASED}+{_UNCASED}*{_CONTRACTION}"
                r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizer:
    """What a tokenizer.ggml.pre value means in llama.cpp: its regexes, whether
    a piece that is itself a token is taken whole before any merge
    (ignore_merges), whether BOS is added where the file has no
    tokenizer.ggml.add_bos_token (add_bos), and whether a decoded text's
    spaces are cleaned (clean_spaces: vocab.clean_up_spaces)."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False
    add_bos: bool = False
    clean_spaces: bool = True


_LLAMA3 = PreTokenizer((_LLAMA3_REGEX,), ignore_merges=True, add_bos=True)
_DIGITS = PreTokenizer((r"\p{N}", _GPT2_REGEX))  # GPT-2's after the digits are cut one by one
# The tokenizer.ggml.pre values vkq implements, each tested against llama.cpp's own
# tokenizer; "" stands for a file without the key (llama.cpp warns and takes "default").
PRE_TOKENIZERS = {
    "": (default := PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2_REGEX, r"\p{N}+", "[0-9][0-9][0-9]"))),
    "default": default,
    "gpt-2": PreTokenizer((_GPT2_REGEX,)),
    **dict.fromkeys(("llama-bpe", "llama3", "llama-v3", "falcon3"), _LLAMA3),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen"), PreTokenizer((_QWEN2_REGEX,), clean_spaces=False)),
    "gpt-4o": PreTokenizer((_GPT4O_REGEX,), clean_spaces=False),
    **dict.fromkeys(("starcoder", "refact", "codeshell", "exaone", "minerva-7b"), _DIGITS),
    **dict.fromkeys(("smollm", "command-r"), replace(_DIGITS, clean_spaces=False)),
}
# llama.cpp's BOS (and EOS) id for a byte-level BPE file that names none.
DEFAULT_BOS_EOS_ID = 11


def open_tokenizer(file: GGUFFile) -> Tokenizer:
    """The tokenizer of the file's tokenizer.ggml.model."""
    kind = metadata(file, "tokenizer.ggml.model")
    if kind == "gpt2":
        return BpeTokenizer(file)
    if kind == "llama":
        return SpmTokenizer(file)
    raise ValueError(f"{file.path.name}: tokenizer model {kind!r} is not supported "
                     "(only 'gpt2', byte-level BPE, and 'llama', SentencePiece)")


class BpeTokenizer(Tokenizer):
    """Byte-level BPE (tokenizer.ggml.model == "gpt2") built with HF `tokenizers`
    from the vocabulary and merges stored in the GGUF file."""

    def __init__(self, file: GGUFFile):
        from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

        path = file.path
        tokens = token_strings(file)
        merges = [tuple(m.split(" ", 1)) for m in token_strings(file, "tokenizer.ggml.merges")]
        bad = next((i for i, m in enumerate(merges) if len(m) != 2 or not all(m)), None)
        if bad is not None:
            raise ValueError(f"{path.name}: tokenizer.ggml.merges[{bad}] is not two tokens split by a space")
        vocab = {}
        for i, tok in enumerate(tokens):
            vocab.setdefault(tok, i)
        pre_name = metadata(file, "tokenizer.ggml.pre", "")
        pre = PRE_TOKENIZERS.get(pre_name) if isinstance(pre_name, str) else None
        if pre is None:
            raise ValueError(f"{path.name}: pre-tokenizer {pre_name!r} (tokenizer.ggml.pre) is not supported "
                             f"(supported: {', '.join(p for p in PRE_TOKENIZERS if p)})")
        try:
            tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=pre.ignore_merges))
        except Exception as e:  # noqa: BLE001 - the library's own words for what the file got wrong
            raise ValueError(f"{path.name}: the vocabulary and merges are no BPE tokenizer: {e}") from None
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.regexes]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        self.n_vocab = len(tokens)
        self.bos_id, self.eos_id = (token_id(file, f"tokenizer.ggml.{which}_token_id", self.n_vocab, DEFAULT_BOS_EOS_ID)
                                    for which in ("bos", "eos"))
        self.eog_ids = end_of_generation(file, tokens, self.eos_id)
        self.add_bos = flag(file, "tokenizer.ggml.add_bos_token", pre.add_bos)
        self.add_eos = flag(file, "tokenizer.ggml.add_eos_token", False)
        # (llama.cpp encodes a byte-level text without the prefix; its detokenizer reads the key)
        self.add_space_prefix = flag(file, "tokenizer.ggml.add_space_prefix", False)
        self.clean_spaces = pre.clean_spaces
        self._check_special(path.name)
        self.kinds = kinds = token_kinds(file, tokens, token_types(file, len(tokens)), self.eog_ids)
        # Control, unknown and user-defined tokens are matched whole in the text.
        control = [AddedToken(t, special=True, normalized=False)
                   for t, ty in zip(tokens, kinds) if ty in (CONTROL, UNKNOWN)]
        user = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, kinds) if ty == USER_DEFINED]
        tk.add_special_tokens(control)
        if user:
            tk.add_tokens(user)
        self.tokenizer = tk
        self.pieces = [_piece(path.name, i, t, ty) for i, (t, ty) in enumerate(zip(tokens, kinds))]

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the byte each of its 256 characters stands
    for. The printable bytes stand for themselves; the others, in order, for
    the characters from U+0100 on."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    alphabet = {chr(b): b for b in printable}
    alphabet.update((chr(0x100 + k), b) for k, b in enumerate(b for b in range(256) if b not in printable))
    return alphabet


_BYTE_OF = _byte_level_alphabet()


def _piece(name: str, ident: int, text: str, kind: int) -> bytes:
    """A token's bytes as llama.cpp's llama_token_to_piece gives them with
    special: control, unknown and user-defined tokens their text as it is;
    a normal token the bytes its characters stand for (a character outside
    the alphabet: llama.cpp's marker "[UNK_BYTE_0x<its UTF-8 in hex><the
    token's text>]"); a byte token its <0xXX>; unused and undefined ones nothing."""
    if kind in (UNKNOWN, CONTROL, USER_DEFINED):
        return text.encode()
    if kind == BYTE:
        return bytes([byte_of_token(name, ident, text)])
    if kind != NORMAL:
        return b""
    out = bytearray()
    for c in text:
        b = _BYTE_OF.get(c)
        out += bytes([b]) if b is not None else b"[UNK_BYTE_0x" + c.encode().hex().encode() + text.encode() + b"]"
    return bytes(out)
