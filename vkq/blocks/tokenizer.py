"""The tokenizer stored in a GGUF file, built with the HF `tokenizers` library.

Byte-level BPE (tokenizer.ggml.model == "gpt2") from the file's vocabulary
and merges, with the pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre`.
"""
from __future__ import annotations

from ..checks import is_int
from .gguf_io import GGUFFile, metadata

# tokenizer.ggml.pre values whose pre-tokenizer is GPT-2's regex after splitting
# digits one by one (llama.cpp's LLAMA_VOCAB_PRE_TYPE_STARCODER group).
_PRE_DIGITS = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
_PRE_GPT2 = ("gpt-2", "gpt2", "default", "")
# llama 3's regex (llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3), for tokenizer.ggml.pre == "llama-bpe".
_LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


class GGUFTokenizer:
    """Byte-level BPE (tokenizer.ggml.model == "gpt2") built with HF `tokenizers`
    from the vocabulary and merges stored in the GGUF file."""

    def __init__(self, file: GGUFFile):
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

        path = file.path
        kind = metadata(file, "tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"{path.name}: tokenizer model {kind!r} is not supported (only 'gpt2', byte-level BPE)")
        def strings(key: str) -> list[str]:
            value = metadata(file, key)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{path.name}: {key} is not a list of strings")
            return value

        tokens = strings("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
        bad = next((i for i, m in enumerate(merges) if len(m) != 2 or not all(m)), None)
        if bad is not None:
            raise ValueError(f"{path.name}: tokenizer.ggml.merges[{bad}] is not two tokens split by a space")
        types = metadata(file, "tokenizer.ggml.token_type", [1] * len(tokens))
        if not isinstance(types, list) or len(types) != len(tokens) or not all(is_int(t) for t in types):
            raise ValueError(f"{path.name}: tokenizer.ggml.token_type is not an integer per token")
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
        elif pre == "llama-bpe":
            tk.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(_LLAMA3_REGEX), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        else:
            raise ValueError(f"{path.name}: pre-tokenizer {pre!r} is not supported "
                             f"(supported: {', '.join(_PRE_DIGITS + ('gpt-2', 'llama-bpe'))})")
        tk.decoder = decoders.ByteLevel()
        # Control tokens (type 3) and user-defined ones (type 4) are matched whole in the text.
        control = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
        user = [AddedToken(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == 4]
        tk.add_special_tokens(control)
        if user:
            tk.add_tokens(user)
        self.tokenizer = tk
        self.n_vocab = len(tokens)
        self.bos_id, self.eos_id = (self._token_id(file, f"tokenizer.ggml.{which}_token_id") for which in ("bos", "eos"))
        self.add_bos = bool(metadata(file, "tokenizer.ggml.add_bos_token", False)) and self.bos_id is not None

    def _token_id(self, file: GGUFFile, key: str) -> int | None:
        value = metadata(file, key, None)
        if value is not None and not (is_int(value) and 0 <= value < self.n_vocab):
            raise ValueError(f"{file.path.name}: {key} is {value!r}, not a token id in [0, {self.n_vocab})")
        return value

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates: bytes of another encoding on a UTF-8 command line
            raise ValueError(f"the prompt is not valid UTF-8 (character {e.start}: {text[e.start]!r}); "
                             "give it in UTF-8") from None
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special)
