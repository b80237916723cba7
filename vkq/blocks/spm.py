"""SentencePiece tokenization of a GGUF file (tokenizer.ggml.model == "llama":
Llama 2, Mistral, Mixtral, TinyLlama), as llama.cpp's SPM tokenizer does it.

Encoding: the special tokens (control, user-defined, unknown; longest text
first) are cut out of the text whole; each text piece between them gets a
space in front where tokenizer.ggml.add_space_prefix says (the text's start,
and after a special token), its spaces become '▁' (U+2581), and its
characters are merged: of the adjacent pairs whose concatenation is a token,
the one with the highest score first (leftmost on ties), until no pair
merges. What is left and is not a token goes out as its UTF-8 bytes, the
byte tokens <0xXX>. Decoding (vocab.Tokenizer.decode) turns '▁' back to
spaces and byte tokens to bytes, and drops the space the encoder put at the
text's start; llama.cpp cleans no spaces of a SentencePiece text.
"""
from __future__ import annotations

import heapq
import math

from ..checks import is_int
from .gguf_io import GGUFFile, metadata
from .vocab import (BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, Tokenizer, byte_of_token, end_of_generation, flag,
                    token_id, token_kinds, token_strings, token_types)

SPACE = "\u2581"  # '▁', SentencePiece's space


class SpmTokenizer(Tokenizer):
    """llama.cpp's SPM tokenizer on the vocabulary, scores and token types of a GGUF file."""

    def __init__(self, file: GGUFFile):
        name = file.path.name
        tokens = token_strings(file)
        self.n_vocab = n = len(tokens)
        types = token_types(file, n)
        scores = metadata(file, "tokenizer.ggml.scores", [0.0] * n)
        if (not isinstance(scores, list) or len(scores) < n
                or not all(isinstance(s, float) or is_int(s) for s in scores)):
            raise ValueError(f"{name}: tokenizer.ggml.scores is not a number per token")
        self.scores = [float(s) for s in scores[:n]]
        # llama.cpp names an empty token this way (an empty piece could never be matched).
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        self.ids: dict[str, int] = {}
        for i, t in enumerate(tokens):
            if self.ids.setdefault(t, i) != i:
                raise ValueError(f"{name}: token {t!r} is in the vocabulary twice (ids {self.ids[t]} and {i})")
        self.tokens = tokens
        # llama.cpp's defaults for an SPM vocabulary: <unk> 0, <s> 1, </s> 2, BOS added, EOS not.
        self.bos_id = token_id(file, "tokenizer.ggml.bos_token_id", n, default=1)
        self.eos_id = token_id(file, "tokenizer.ggml.eos_token_id", n, default=2)
        self.eog_ids = end_of_generation(file, tokens, self.eos_id)
        self.add_bos = flag(file, "tokenizer.ggml.add_bos_token", True)
        self.add_eos = flag(file, "tokenizer.ggml.add_eos_token", False)
        self.add_space_prefix = flag(file, "tokenizer.ggml.add_space_prefix", True)
        self.clean_spaces = False
        self._check_special(name)
        self.kinds = kinds = token_kinds(file, tokens, types, self.eog_ids)
        # Cut out of the text whole, the longest (in UTF-8 bytes, as llama.cpp orders them) first:
        # a longer one may hold a shorter one.
        self.special = sorted((i for i, ty in enumerate(kinds) if ty in (CONTROL, USER_DEFINED, UNKNOWN)),
                              key=lambda i: (-len(tokens[i].encode()), i))
        # The token of each byte: <0xXX>, or the byte itself as a token for ASCII (llama.cpp's fallback).
        self.byte_ids = [self.ids.get(f"<0x{b:02X}>", self.ids.get(chr(b)) if b < 128 else None) for b in range(256)]
        self.pieces = [_piece(name, i, t, ty) for i, (t, ty) in enumerate(zip(tokens, kinds))]

    def _encode(self, text: str) -> list[int]:
        parts: list[str | int] = [text] if text else []
        for i in self.special:
            word, cut = self.tokens[i], []
            for part in parts:
                if isinstance(part, int) or word not in part:
                    cut.append(part)
                    continue
                for k, piece in enumerate(part.split(word)):
                    if k:
                        cut.append(i)
                    if piece:
                        cut.append(piece)
            parts = cut
        ids: list[int] = []
        after_special = True  # the text's start counts as following a special token
        for part in parts:
            if isinstance(part, int):
                ids.append(part)
                after_special = True
                continue
            if self.add_space_prefix and after_special:
                part = " " + part
            self._merge(part.replace(" ", SPACE), ids)
            after_special = False
        return ids

    def _merge(self, text: str, out: list[int]) -> None:
        """The SPM merges of text's characters, their tokens appended to out."""
        ids, scores = self.ids, self.scores
        n = len(text)
        start = list(range(n))
        length = [1] * n  # in characters; 0 once merged into the symbol on its left
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n)) + [-1]
        heap: list[tuple[float, int, int, int]] = []

        def offer(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            size = length[left] + length[right]
            tid = ids.get(text[start[left]:start[left] + size])
            if tid is not None and not math.isnan(scores[tid]):
                heapq.heappush(heap, (-scores[tid], left, right, size))  # highest score, then leftmost

        for i in range(1, n):
            offer(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if length[left] == 0 or length[right] == 0 or length[left] + length[right] != size:
                continue  # one of the two has merged since this pair was offered
            length[left], length[right] = size, 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            offer(prev[left], left)
            offer(left, nxt[left])
        i = 0 if n else -1
        while i >= 0:
            piece = text[start[i]:start[i] + length[i]]
            tid = ids.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                for b in piece.encode():
                    if self.byte_ids[b] is None:
                        raise ValueError(f"{piece.replace(SPACE, ' ')!r} is not in the vocabulary, and it has "
                                         f"no byte token <0x{b:02X}> to spell it with")
                    out.append(self.byte_ids[b])
            i = nxt[i]


def _piece(name: str, ident: int, text: str, kind: int) -> bytes:
    """What a token decodes to, as llama.cpp's llama_token_to_piece with
    special (decode drops control and unknown tokens' text unless
    skip_special is false); unused and undefined tokens to nothing."""
    if kind in (UNKNOWN, CONTROL, USER_DEFINED):
        return text.encode()
    if kind == NORMAL:
        return text.replace(SPACE, " ").encode()
    if kind == BYTE:
        return bytes([byte_of_token(name, ident, text)])
    return b""
