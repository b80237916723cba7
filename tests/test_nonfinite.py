"""NaN and inf in x reach the result on every type and path, MUL_MAT_ID too;
finite x near float32's limit gives the finite result numpy gives.

float64 numpy gives NaN in every output of a column whose x holds a NaN,
and +-inf or NaN in every output of a column holding an inf. vkq gives NaN
wherever numpy gives NaN, and NaN or the same inf where numpy gives an inf
(docs/numerics.md, "Non-finite x"); never a finite number. The int8 path's quantizer
marks a block holding NaN or inf with a NaN scale (shaders/quantize_q8_1.comp),
so nothing depends on the host seeing x. The finite columns beside them are
unaffected.

x up to float32's largest values times small weights has finite products,
but a block's sums of quants times x (up to 2^11 times the largest |x|)
do not fit float32: both paths keep them in range (docs/numerics.md, "Large and tiny x") and
match float64 numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import vkq.blocks.reference as ref
from ggml_quant import quantize, random_weights
from conftest import NMSE_GGML, TYPES, type_paths
from vkq.dispatch.config import PipelineConfig

ROWS, K = 19, 512
N_EXPERT = 3


def poisoned_x(ncols: int) -> np.ndarray:
    """(K, ncols): column 0 a NaN, column 1 a +inf, column 2 a -inf and a +inf
    in another block, the rest finite."""
    x = np.random.default_rng(3).uniform(-1, 1, (K, ncols)).astype(np.float32)
    x[37, 0] = np.nan
    if ncols > 1:
        x[300, 1] = np.inf
    if ncols > 2:
        x[5, 2], x[400, 2] = -np.inf, np.inf
    return x


def assert_nonfinite_like_numpy(y: np.ndarray, exact: np.ndarray, what: str) -> None:
    for j in range(exact.shape[1]):
        yc, ec = y[:, j], exact[:, j]
        if np.isfinite(ec).all():
            assert ref.nmse(yc, ec) < 5e-4, f"{what} column {j}: a finite column changed"
            continue
        assert not np.isfinite(yc).any(), f"{what} column {j}: finite outputs {yc[np.isfinite(yc)][:3]}"
        nan = np.isnan(ec)
        assert np.isnan(yc[nan]).all(), f"{what} column {j}: numpy's NaN outputs are not NaN"
        assert (np.isnan(yc[~nan]) | (yc[~nan] == ec[~nan])).all(), f"{what} column {j}: an inf of the wrong sign"


@pytest.fixture(scope="module")
def matrices(backend):
    out = {}
    for qtype in TYPES:
        data = random_weights(N_EXPERT * ROWS, K, qtype, seed=11)
        w64 = ref.dequantize(qtype, (N_EXPERT, ROWS, K), data)
        stack = backend.upload(qtype, (N_EXPERT, ROWS, K), data)
        matrix = backend.upload(qtype, (ROWS, K), data[:ROWS])
        out[qtype] = matrix, stack, w64
    return out


# The second activation plane (q8_1x2) on a few types: the marking is the same code.
CASES = [pytest.param(t, p, "q8_1", id=f"{t}-{p}") for t, p in [c.values for c in type_paths()]] + [
    pytest.param(t, "mmvq", "q8_1x2", id=f"{t}-mmvq-q8_1x2") for t in ("Q4_0", "Q8_0", "Q4_K", "Q6_K")]


@pytest.mark.parametrize("qtype,path,activations", CASES)
def test_matvec_nonfinite_x(backend, matrices, qtype, path, activations):
    w, _, w64 = matrices[qtype]
    x = poisoned_x(4)
    with np.errstate(invalid="ignore"):
        exact = w64[0] @ x.astype(np.float64)
    y = backend.matvec(w, x, path=path, activations=activations)
    assert_nonfinite_like_numpy(y, exact, f"{qtype} {path} {activations}")


@pytest.mark.parametrize("qtype,path", type_paths())
def test_matvec_id_nonfinite_x(backend, matrices, qtype, path):
    _, stack, w64 = matrices[qtype]
    ids = np.array([2, 0, 2], np.int32)
    x = poisoned_x(3).T.copy()  # one input per selected expert: NaN, +inf, -inf and +inf
    y = backend.matvec_id(stack, x, ids, path=path)
    with np.errstate(invalid="ignore"):
        exact = np.stack([w64[e] @ x[i].astype(np.float64) for i, e in enumerate(ids)])
    assert_nonfinite_like_numpy(y.T, exact.T, f"{qtype} {path} matvec_id")
    shared = backend.matvec_id(stack, x[0].copy(), ids, path=path)  # one x (with a NaN) for all
    assert np.isnan(shared).all(), f"{qtype} {path} matvec_id, shared x with a NaN"


def test_model_marks_nonfinite_blocks():
    """vkq.blocks.reference's int8 model: a block with NaN or inf is NaN, the others as before."""
    x = np.random.default_rng(0).uniform(-1, 1, 96).astype(np.float32)
    clean = ref.q8_1_values(x, 2)
    x[40] = np.inf
    seen = ref.q8_1_values(x, 2)
    assert np.isnan(seen[32:64]).all()
    np.testing.assert_array_equal(seen[:32], clean[:32])
    np.testing.assert_array_equal(seen[64:], clean[64:])


# -- finite x near float32's limit ------------------------------------------------

LARGE_X_SCALES = (1e35, 1e36, 1e37, np.finfo(np.float32).max)


@pytest.fixture(scope="module")
def small_matrices(backend):
    """Weights in [-0.01, 0.01]: products with x up to 3.4e38 stay finite."""
    out = {}
    for qtype in TYPES:
        values = np.random.default_rng(12).uniform(-0.01, 0.01, (N_EXPERT * ROWS, K)).astype(np.float32)
        data = quantize(values, qtype)
        out[qtype] = (backend.upload(qtype, (ROWS, K), data[:ROWS]),
                      backend.upload(qtype, (N_EXPERT, ROWS, K), data),
                      ref.dequantize(qtype, (N_EXPERT, ROWS, K), data))
    return out


def large_x(ncols: int) -> np.ndarray:
    """(K, ncols): column j uniform in +-LARGE_X_SCALES[j]."""
    unit = np.random.default_rng(5).uniform(-1, 1, (K, ncols))
    return (unit * np.array(LARGE_X_SCALES[:ncols])).astype(np.float32)


def assert_finite_like_numpy(y: np.ndarray, exact: np.ndarray, what: str) -> None:
    assert np.isfinite(exact).all() and (np.abs(exact) < np.finfo(np.float32).max).all()
    for j in range(exact.shape[1]):
        assert np.isfinite(y[:, j]).all(), f"{what} column {j} (|x| up to {LARGE_X_SCALES[j]:.1e}): {y[:3, j]}"
        assert ref.nmse(y[:, j], exact[:, j]) < NMSE_GGML, f"{what} column {j}"


def split_k_config(backend, path: str) -> PipelineConfig:
    """Threads that split K and reduce (a GPU's launch), on this device."""
    caps = backend.device.caps
    return PipelineConfig(path, path == "mmvq" and caps.int_dot, caps.subgroup_arithmetic, wg_size=8,
                          rows_per_wg=3, chunks_per_thread=1, split_k=True, source="test")


@pytest.mark.parametrize("qtype,path", type_paths())
def test_large_finite_x(backend, small_matrices, qtype, path):
    w, stack, w64 = small_matrices[qtype]
    x = large_x(len(LARGE_X_SCALES))
    exact = w64[0] @ x.astype(np.float64)
    assert_finite_like_numpy(backend.matvec(w, x, path=path), exact, f"{qtype} {path}")
    assert_finite_like_numpy(backend.matvec(w, x, config=split_k_config(backend, path)), exact,
                             f"{qtype} {path} split_k")
    if path == "mmvq":
        assert_finite_like_numpy(backend.matvec(w, x, path=path, activations="q8_1x2"), exact,
                                 f"{qtype} {path} q8_1x2")
    ids = np.array([2, 0, 1], np.int32)
    xs = large_x(3).T.copy()  # one input per selected expert
    y = backend.matvec_id(stack, xs, ids, path=path)
    exact = np.stack([w64[e] @ xs[i].astype(np.float64) for i, e in enumerate(ids)])
    assert_finite_like_numpy(y.T, exact.T, f"{qtype} {path} matvec_id")
