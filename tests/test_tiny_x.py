"""x of float32 subnormals: the mat-vec and the tiled mat-mat answer alike.

`matmul` runs the mat-vec up to 8 columns and the tiled mat-mat beyond, so a
column's result must not depend on which took it, down to x of subnormal
floats (|x| below 1.2e-38; lavapipe keeps them, a GPU may flush them).

- The float path (dmmv; the mat-mat's float flavour) keeps subnormal x as
  float32 does: the mat-vec sums quants times x unscaled unless a half-block
  of x holds a value of 2^64 or more (docs/numerics.md, "Large and tiny
  x"), as the mat-mat multiplies dequantized weights by x unscaled. The
  result is then as close to float64 numpy as float32's subnormal spacing
  (2^-149) allows, on both. A device that flushes subnormals gives zeros on
  both.
- The int8 path (mmvq; the mat-mat's int8 flavour) quantizes x to Q8_1
  blocks on both, and a block whose largest |x| is below 127 x 2^-126
  (about 1.5e-36) becomes zero (tests/test_tiny_blocks.py): both give
  exactly zero for such x.
"""
from __future__ import annotations

import numpy as np
import pytest

import vkq.blocks.reference as ref
from conftest import TYPES
from ggml_quant import random_weights
from test_matmul import FAMILIES, odd_k
from vkq.blocks.formats import FORMATS

ROWS = 19
NCOLS = 9  # the first 8 through the mat-vec, all 9 through the mat-mat
# |x| scales: the smallest normals, then subnormals of ~16 and ~10 bits.
SCALES = (1e-38, 1e-40, 1e-42)
# float32's subnormal spacing (2^-149) against outputs of |w x| sqrt(K):
# the mat-mat measured 1.5e-10 at 1e-40 and 1.5e-6 at 1e-42 on lavapipe
# (uniform [-1, 1] weights); each bound is 10x that, and far below the
# 1e-3 and 1.0 (all zeros) that scaling x by 2^-12 first gave.
BOUNDS = {1e-38: 1e-12, 1e-40: 1.5e-9, 1e-42: 1.5e-5}


def tiny_x(k: int, scale: float) -> np.ndarray:
    return (np.random.default_rng(7).uniform(-1, 1, (k, NCOLS)) * scale).astype(np.float32)


@pytest.fixture(scope="module")
def matrices(backend):
    out = {}

    def get(qtype):
        if qtype not in out:
            k = odd_k(qtype)
            data = random_weights(ROWS, k, qtype, seed=3)
            out[qtype] = backend.upload(qtype, (ROWS, k), data), ref.dequantize(qtype, (ROWS, k), data)
        return out[qtype]
    return get


def per_type(types) -> list:
    return [pytest.param(t, marks=() if t in FAMILIES else pytest.mark.slow) for t in types]


@pytest.mark.parametrize("qtype", per_type(TYPES))
def test_float_path_keeps_subnormal_x(backend, matrices, qtype):
    w, w64 = matrices(qtype)
    for scale in SCALES:
        x = tiny_x(w64.shape[1], scale)
        exact = w64 @ x.astype(np.float64)
        by_matvec = np.concatenate([backend.matmul(w, x[:, :1], path="dmmv"),
                                    backend.matmul(w, x[:, 1:8], path="dmmv")], axis=1)
        by_matmul = backend.matmul(w, x, path="dmmv")
        what = f"{qtype} dmmv |x| ~ {scale:g}"
        if not by_matmul.any():  # a device that flushes subnormals: the same zeros from the mat-vec
            assert not by_matvec.any(), f"{what}: the mat-mat flushed subnormal x, the mat-vec did not"
            continue
        assert ref.nmse(by_matmul, exact) < BOUNDS[scale], f"{what}: the mat-mat"
        assert ref.nmse(by_matvec, exact[:, :8]) < BOUNDS[scale], (
            f"{what}: the mat-vec {ref.nmse(by_matvec, exact[:, :8]):.2e}, the mat-mat "
            f"{ref.nmse(by_matmul, exact):.2e}")


@pytest.mark.parametrize("qtype", per_type(t for t in TYPES if FORMATS[t].has_int8_path))
def test_int8_path_flushes_tiny_blocks_alike(backend, matrices, qtype):
    w, w64 = matrices(qtype)
    x = tiny_x(w64.shape[1], 1e-40)
    x[:, 0] *= 1e4  # ~1e-36: still below the floor
    by_matvec = backend.matmul(w, x[:, :8], path="mmvq")
    by_matmul = backend.matmul(w, x, path="mmvq")
    assert not by_matvec.any() and not by_matmul.any(), f"{qtype} mmvq: tiny blocks of x must become zero on both"


def test_matvec_id_keeps_subnormal_x(backend):
    """MUL_MAT_ID's float path is the same shader's: subnormal x kept."""
    qtype, n_expert, k = "Q4_K", 3, 512
    data = random_weights(n_expert * ROWS, k, qtype, seed=5)
    stack = backend.upload(qtype, (n_expert, ROWS, k), data)
    w64 = ref.dequantize(qtype, (n_expert, ROWS, k), data)
    ids = np.array([2, 0, 1], np.int32)
    x = tiny_x(k, 1e-40)[:, :3].T.copy()
    y = backend.matvec_id(stack, x, ids, path="dmmv")
    exact = np.stack([w64[e] @ x[i].astype(np.float64) for i, e in enumerate(ids)])
    if y.any():
        assert ref.nmse(y, exact) < BOUNDS[1e-40]
