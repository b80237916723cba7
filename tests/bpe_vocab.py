"""A small byte-level BPE vocabulary trained here, as GGUF tokenizer metadata.

`train()` has the HF `tokenizers` trainer make a byte-level BPE of some 440
tokens (in a few hundredths of a second) on TEXT: prose, contractions,
digits, CJK, emoji, full-width and Arabic digits, symbols, runs of spaces,
tabs and newlines; two control tokens first (<|endoftext|>, <|begin|>) and
WHOLE, tokens no merge sequence reaches (a word that llama.cpp takes whole
where its pre-tokenizer ignores merges). `gguf_tokenizer(pre, **extra)`
gives its tokenizer.ggml.* metadata, with tokenizer.ggml.pre `pre` (None:
no key) and other keys added, for tiny_llama.write_gguf.
"""
from __future__ import annotations

import json

import gguf

TEXT = ["The quick brown fox's 12345 jumps; it's 3.14159 and 1,000,000.", "東京都は日本の首都です。漢字とかな",
        "emoji 🙂🎉 and ÄÖÜ café naïve", "  lots   of    spaces\n\n\ttabs\r\n", "don't won't I'm we'll they'd you've",
        "x = a+b <= c^d ~ e|f $g", "ＡＢＣ１２３ ١٢٣ Ⅻ ½", "hello world hello world the the the"]
CONTROL_TOKENS = ("<|endoftext|>", "<|begin|>")
WHOLE = ("abc", "Ġquick", "ĠtheĠ")
_trained: tuple[list[str], list[str]] | None = None


def train() -> tuple[list[str], list[str]]:
    """(tokens, merges) of the vocabulary (trained once per process)."""
    global _trained
    if _trained is None:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.train_from_iterator(TEXT * 20, trainers.BpeTrainer(
            vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=list(CONTROL_TOKENS), show_progress=False))
        model = json.loads(tk.to_str())["model"]
        tokens = sorted(model["vocab"], key=model["vocab"].get)
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        _trained = tokens + [w for w in WHOLE if w not in model["vocab"]], merges
    return _trained


def gguf_tokenizer(pre: str | None, **extra) -> dict:
    """tokenizer.ggml.* metadata (EOS <|endoftext|>), `extra` keys (without
    the tokenizer.ggml. prefix) added or replacing."""
    V = gguf.GGUFValueType
    tokens, merges = train()
    types = [3 if t in CONTROL_TOKENS else 1 for t in tokens]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": (tokens, V.ARRAY, V.STRING),
            "tokenizer.ggml.merges": (merges, V.ARRAY, V.STRING), "tokenizer.ggml.token_type": (types, V.ARRAY, V.INT32),
            "tokenizer.ggml.eos_token_id": 0}
    if pre is not None:
        meta["tokenizer.ggml.pre"] = pre
    return meta | {f"tokenizer.ggml.{k}": v for k, v in extra.items()}
