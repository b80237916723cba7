"""Quantized test weights made by ggml's own quantizer.

The tests must not check vkq against a quantizer we wrote ourselves (a shared
misunderstanding of a block layout would then pass unnoticed), so this module
calls `ggml_quantize_chunk` from the `libggml-base` shared library shipped by
the `libggml-python` wheel, through ctypes. Its output is the byte layout a
GGUF file stores: one row after another, each row a run of blocks.

    quantize(values, qtype, imatrix=None)  float32 (rows, K) -> uint8 (rows, row_bytes)
    random_weights(rows, k, qtype) the same for uniform [-1, 1] values
    importance(k, seed)            a realistic importance matrix for a row length
    to_float(data, qtype)          ggml's own dequantizer (its type traits' to_float)
    available()                    whether libggml-base could be loaded

Type ids and block sizes come from `gguf` (GGMLQuantizationType,
GGML_QUANT_SIZES), and for Q2_0, which gguf 0.19 lacks, from ggml.h and
ggml-common.h (GGUF_LACKS); when the library is loaded they are checked
against the library itself (ggml_type_name, ggml_blck_size, ggml_type_size),
because the numeric ids are the ABI and a wheel built from another ggml
revision could number the types differently. `python tests/ggml_quant.py`
additionally checks the ids against the enum in libggml/include/ggml.h and
prints the reconstruction error (NMSE) of every type, dequantized by ggml.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import importlib
import os
import re

import gguf
import numpy as np

GGMLType = gguf.GGMLQuantizationType

# The types the tests use. ggml refuses IQ2_XXS, IQ2_XS, IQ2_S and IQ1_S/IQ1_M
# without an importance matrix (it aborts the process, so quantize() checks
# first); they, and every other i-quant, are quantized with importance(k).
TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4",
         "IQ4_NL", "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S",
         "NVFP4", "Q1_0", "Q2_0", "TQ1_0", "TQ2_0")
IQ_TYPES = tuple(t for t in TYPES if t.startswith("IQ"))
# Types gguf 0.19's GGMLQuantizationType lacks: (ggml id, block elements, block bytes).
GGUF_LACKS = {"Q2_0": (42, 64, 18)}

# Upper bounds on the normalized mean squared error sum((x-y)^2)/sum(x^2) of
# quantize -> gguf dequantize for uniform [-1, 1] input, used by self_check().
# They sit at about 2x what ggml achieves (see the module's __main__),
# so a broken layout (NMSE ~ 1) fails and a correct one never does.
NMSE_BOUND = {
    "F32": 0.0, "F16": 1e-7, "BF16": 5e-6,
    "Q8_0": 3e-5,
    "Q6_K": 4e-4,
    "Q5_0": 2e-3, "Q5_1": 2e-3, "Q5_K": 2e-3,
    "Q4_0": 8e-3, "Q4_1": 8e-3, "Q4_K": 6e-3, "IQ4_NL": 9e-3, "IQ4_XS": 9e-3,
    "Q3_K": 3e-2, "MXFP4": 4e-2, "IQ3_S": 4e-2, "IQ3_XXS": 8e-2,
    "Q2_K": 1e-1, "IQ2_S": 0.13, "IQ2_XS": 0.2, "IQ2_XXS": 0.26,
    "IQ1_M": 0.4, "IQ1_S": 0.43,  # the coarsest formats (a broken layout gives ~1 or more)
    "NVFP4": 3e-2,
    # Q2_0 / TQ: uniform values rounded to -1, 0, 1 (2) times the block's amax (1/4 of the power);
    # Q1_0: +-(mean |x|), the same error here
    "Q1_0": 0.3, "Q2_0": 0.3, "TQ1_0": 0.3, "TQ2_0": 0.3,
}


def type_id(name: str) -> int:
    """ggml's id of a block type."""
    return GGUF_LACKS[name][0] if name in GGUF_LACKS else int(GGMLType[name])


def block_sizes(name: str) -> tuple[int, int]:
    """(elements, bytes) of a block of a type."""
    return GGUF_LACKS[name][1:] if name in GGUF_LACKS else gguf.GGML_QUANT_SIZES[GGMLType[name]]


class _TypeTraits(ctypes.Structure):
    """struct ggml_type_traits (ggml.h): the part up to the dequantizer."""

    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64), ("blck_size_interleave", ctypes.c_int64),
                ("type_size", ctypes.c_size_t), ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p)]


# typedef void (*ggml_to_float_t)(const void * x, float * y, int64_t k);
_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def _library_path() -> str:
    """lib64/libggml-base.so inside the installed `libggml` package."""
    pkg = importlib.import_module("libggml")
    return os.path.join(os.path.dirname(pkg.__file__), "lib64", "libggml-base.so")


def _header_path() -> str:
    pkg = importlib.import_module("libggml")
    return os.path.join(os.path.dirname(pkg.__file__), "include", "ggml.h")


@functools.lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    """Load libggml-base once, declare the signatures we call (from ggml.h)
    and check that the library agrees with gguf about every type in TYPES."""
    lib = ctypes.CDLL(_library_path())

    # enum ggml_type is a plain C enum: passed as int.
    # size_t ggml_quantize_chunk(enum ggml_type type, const float * src,
    #     void * dst, int64_t start, int64_t nrows, int64_t n_per_row,
    #     const float * imatrix);
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]          # void (enum ggml_type)
    lib.ggml_quantize_init.restype = None
    lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
    lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]  # size_t (type, int64 ne)
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_blck_size.argtypes = [ctypes.c_int]              # int64_t (type)
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_type_size.argtypes = [ctypes.c_int]              # size_t (type)
    lib.ggml_type_size.restype = ctypes.c_size_t
    lib.ggml_type_name.argtypes = [ctypes.c_int]              # const char * (type)
    lib.ggml_type_name.restype = ctypes.c_char_p
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]        # const struct ggml_type_traits * (type)
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)

    # The ids are the ABI: a mismatch would silently produce another format.
    for name in TYPES:
        t = type_id(name)
        got = (lib.ggml_type_name(t) or b"").decode().upper()
        sizes = (lib.ggml_blck_size(t), lib.ggml_type_size(t))
        if got != name or sizes != tuple(block_sizes(name)):
            raise RuntimeError(
                f"libggml-base disagrees with gguf about {name} (id {t}): "
                f"library says {got!r} with (block, bytes) {sizes}, "
                f"gguf says {block_sizes(name)}")
    return lib


def available() -> bool:
    """Whether libggml-base could be loaded (and agrees with gguf)."""
    try:
        _lib()
    except (ImportError, OSError, AttributeError, RuntimeError):
        return False
    return True


def _type(qtype: str) -> str:
    name = qtype.upper() if isinstance(qtype, str) else None
    if name not in TYPES:
        raise ValueError(f"unknown or unsupported type {qtype!r}; expected one of {TYPES}")
    return name


def importance(k: int, seed: int = 0) -> np.ndarray:
    """A realistic importance matrix for rows of k elements: what llama.cpp's
    imatrix tool stores, the mean square of each input column's activation
    over a corpus. LLM activations have a log-normal spread of column
    magnitudes and a few outlier columns far above the rest (about 1%,
    10-100x); this draws that shape, float32 (k,), all positive."""
    rng = np.random.default_rng(seed + 7919 * k)
    imatrix = rng.lognormal(0.0, 1.0, k)
    outliers = rng.random(k) < 0.01
    imatrix[outliers] *= rng.uniform(10.0, 100.0, int(outliers.sum()))
    return imatrix.astype(np.float32)


def quantize(values: np.ndarray, qtype: str, imatrix: np.ndarray | None = None) -> np.ndarray:
    """Quantize a float32 array of shape (rows, K) with ggml's ggml_quantize_chunk.

    qtype: one of TYPES (case-insensitive). imatrix: float32 (K,) importance
    weights; the i-quants get importance(K) when none is given (ggml needs
    one for IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M), the other types are
    quantized unweighted, as a model quantized without imatrix. Returns the
    raw bytes as a numpy uint8 array of shape (rows, row_bytes), exactly as a
    GGUF file stores them.
    """
    name = _type(qtype)
    t = type_id(name)
    if not isinstance(values, np.ndarray) or values.dtype != np.float32:
        raise ValueError(f"values must be a float32 ndarray, got {getattr(values, 'dtype', type(values))}")
    if values.ndim != 2:
        raise ValueError(f"values must have shape (rows, K), got {values.shape}")
    rows, k = values.shape
    block, block_bytes = block_sizes(name)
    # ggml only GGML_ASSERTs this (aborting the interpreter), so check first.
    if k == 0 or k % block:
        raise ValueError(f"K={k} is not a positive multiple of the {name} block size {block}")
    row_bytes = k // block * block_bytes

    lib = _lib()
    if lib.ggml_row_size(t, k) != row_bytes:  # same rule, asked of the library
        raise RuntimeError(f"ggml_row_size({name}, {k}) != {row_bytes}")
    src = np.ascontiguousarray(values)
    dst = np.zeros((rows, row_bytes), dtype=np.uint8)
    if rows == 0:
        return dst
    if imatrix is None and name in IQ_TYPES:
        imatrix = importance(k)
    if imatrix is not None:
        imatrix = np.ascontiguousarray(imatrix, np.float32)
        if imatrix.shape != (k,) or not (np.isfinite(imatrix).all() and (imatrix > 0).all()):
            raise ValueError(f"imatrix must be {k} positive finite float32 values, got shape {imatrix.shape}")
    elif lib.ggml_quantize_requires_imatrix(t):  # ggml would abort the process
        raise ValueError(f"ggml quantizes {name} only with an importance matrix")
    # Builds the lookup tables some types need; cheap, and idempotent.
    lib.ggml_quantize_init(t)
    im = None if imatrix is None else imatrix.ctypes.data

    def chunk(first: int, last: int) -> int:  # rows first .. last - 1; ctypes lets go of the GIL
        return lib.ggml_quantize_chunk(t, src.ctypes.data, dst.ctypes.data, first * k, last - first, k, im)

    # Rows are quantized independently: a chunk per core (the i-quants' searches are slow).
    bounds = np.linspace(0, rows, min(rows, os.cpu_count() or 1) + 1).astype(int)
    with concurrent.futures.ThreadPoolExecutor(len(bounds) - 1) as pool:
        written = sum(pool.map(chunk, bounds[:-1], bounds[1:]))
    if written != rows * row_bytes:
        raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {rows * row_bytes}")
    return dst


def random_weights(rows: int, k: int, qtype: str, seed: int = 0) -> np.ndarray:
    """Uniform [-1, 1] float32 (like ggml's test-backend-ops), quantized with
    quantize(); returns uint8 (rows, row_bytes)."""
    values = np.random.default_rng(seed).uniform(-1.0, 1.0, (rows, k)).astype(np.float32)
    return quantize(values, qtype)


def to_float(data: np.ndarray, qtype: str) -> np.ndarray:
    """float32 values of GGUF blocks (uint8, any shape holding whole blocks) by
    ggml's own dequantizer, the to_float of its type traits; flat."""
    name = _type(qtype)
    block, block_bytes = block_sizes(name)
    raw = np.ascontiguousarray(data, np.uint8).reshape(-1)
    if raw.size % block_bytes:
        raise ValueError(f"{raw.size} bytes are not whole {name} blocks of {block_bytes}")
    convert = _lib().ggml_get_type_traits(type_id(name)).contents.to_float
    if name == "F32" and not convert:  # ggml has no conversion of F32 to F32
        return raw.view(np.float32).copy()
    out = np.empty(raw.size // block_bytes * block, np.float32)
    if out.size:
        _TO_FLOAT(convert)(raw.ctypes.data, out.ctypes.data, out.size)
    return out


def nmse(values: np.ndarray, data: np.ndarray, qtype: str) -> float:
    """sum((x - y)^2) / sum(x^2), y = ggml's dequantization of `data`."""
    y = to_float(data, qtype).astype(np.float64).reshape(values.shape)
    x = values.astype(np.float64)
    return float(np.sum((x - y) ** 2) / np.sum(x ** 2))


def check_header_enum() -> None:
    """The GGML_TYPE_* ids in libggml/include/ggml.h equal gguf's ids (and GGUF_LACKS')."""
    with open(_header_path()) as f:
        enum = re.search(r"enum ggml_type \{(.*?)\};", f.read(), re.S).group(1)
    # Commented-out (removed) types start with "//" and are skipped by ^\s*.
    ids = {m[1]: int(m[2]) for m in re.finditer(r"^\s*GGML_TYPE_(\w+)\s*=\s*(\d+)", enum, re.M)}
    for name in TYPES:
        if ids.get(name) != type_id(name):
            raise AssertionError(f"ggml.h has GGML_TYPE_{name} = {ids.get(name)}, "
                                 f"gguf has {type_id(name)}")


def self_check(rows: int = 64, k: int = 4096, seed: int = 0) -> dict[str, float]:
    """Quantize uniform [-1, 1] data to every type, dequantize it with gguf and
    check the NMSE against NMSE_BOUND. Returns {type: nmse}."""
    check_header_enum()
    values = np.random.default_rng(seed).uniform(-1.0, 1.0, (rows, k)).astype(np.float32)
    result = {}
    for name in TYPES:
        data = quantize(values, name)
        assert np.array_equal(data, random_weights(rows, k, name, seed)), name
        result[name] = e = nmse(values, data, name)
        if not e <= NMSE_BOUND[name]:
            raise AssertionError(f"{name}: NMSE {e:.3g} above bound {NMSE_BOUND[name]:.3g}")
    return result


if __name__ == "__main__":
    print(f"libggml-base: {_library_path()}")
    for name, e in self_check().items():
        print(f"{name:6s} NMSE {e:.3e}  (bound {NMSE_BOUND[name]:.0e})")
