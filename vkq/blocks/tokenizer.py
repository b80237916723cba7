"""The tokenizer stored in a GGUF file: `open_tokenizer(file)`.

Byte-level BPE (tokenizer.ggml.model == "gpt2"), here, built with the HF
`tokenizers` library from the file's vocabulary and merges, with the
pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre`; SentencePiece
("llama") in `spm`. Both implement `vocab.Tokenizer`.
"""
from __future__ import annotations

from .gguf_io import GGUFFile, metadata
from .spm import SpmTokenizer
from .vocab import CONTROL, USER_DEFINED, Tokenizer, end_of_generation, flag, token_id, token_strings, token_types

# tokenizer.ggml.pre values whose pre-tokenizer is GPT-2's regex after splitting
# digits one by one (llama.cpp's LLAMA_VOCAB_PRE_TYPE_STARCODER group).
_PRE_DIGITS = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
_PRE_GPT2 = ("gpt-2", "gpt2", "default", "")
# llama 3's regex (llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3), for tokenizer.ggml.pre == "llama-bpe".
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's and Qwen3's (llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2, tokenizer.ggml.pre == "qwen2"):
# llama 3's, but digits one by one.
_QWEN2_REGEX = _LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
# tokenizer.ggml.pre values whose pre-tokenizer is one regex split, then byte-level.
_PRE_REGEX = {"llama-bpe": _LLAMA3_REGEX, "qwen2": _QWEN2_REGEX}


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
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

        path = file.path
        tokens = token_strings(file)
        merges = [tuple(m.split(" ", 1)) for m in token_strings(file, "tokenizer.ggml.merges")]
        bad = next((i for i, m in enumerate(merges) if len(m) != 2 or not all(m)), None)
        if bad is not None:
            raise ValueError(f"{path.name}: tokenizer.ggml.merges[{bad}] is not two tokens split by a space")
        types = token_types(file, len(tokens))
        vocab = {}
        for i, tok in enumerate(tokens):
            vocab.setdefault(tok, i)
        try:
            tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        except Exception as e:  # noqa: BLE001 - the library's own words for what the file got wrong
            raise ValueError(f"{path.name}: the vocabulary and merges are no BPE tokenizer: {e}") from None
        pre = str(metadata(file, "tokenizer.ggml.pre", "default"))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if pre in _PRE_DIGITS:
            tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        elif pre in _PRE_GPT2:
            tk.pre_tokenizer = byte_level
        elif pre in _PRE_REGEX:
            tk.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(_PRE_REGEX[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        else:
            raise ValueError(f"{path.name}: pre-tokenizer {pre!r} is not supported "
                             f"(supported: {', '.join(_PRE_DIGITS + ('gpt-2', *_PRE_REGEX))})")
        tk.decoder = decoders.ByteLevel()
        # Control tokens (type 3) and user-defined ones (type 4) are matched whole in the text.
        control = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == CONTROL]
        user = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED]
        tk.add_special_tokens(control)
        if user:
            tk.add_tokens(user)
        self.tokenizer = tk
        self.n_vocab = len(tokens)
        self.bos_id, self.eos_id = (token_id(file, f"tokenizer.ggml.{which}_token_id", self.n_vocab)
                                    for which in ("bos", "eos"))
        self.eog_ids = end_of_generation(file, tokens, self.eos_id)
        self.add_bos = flag(file, "tokenizer.ggml.add_bos_token", False) and self.bos_id is not None
        self.add_eos = flag(file, "tokenizer.ggml.add_eos_token", False) and self.eos_id is not None

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids, skip_special: bool = True, continuation: bool = False) -> str:
        # Byte-level BPE keeps every space in its tokens: a continuation decodes the same.
        return self.tokenizer.decode(self.check_decode(ids), skip_special_tokens=skip_special)
