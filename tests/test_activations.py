"""The int8 path's two activation formats, "q8_1" and "q8_1x2".

"q8_1x2" quantizes x to Q8_1 and then the fp32 rounding residual again
(shaders/quantize_q8_1.comp), so the int8 path multiplies by about 14-bit
activations. Checked like test_matvec.py: within NMSE_TIGHT of
vkq.blocks.reference's model of the two planes (planes=2), for every type, the
OpSDot and int32 variants, several columns and MUL_MAT_ID; and, what the
format is for, far closer to the exact product than one plane on activations
with outliers (as real models have).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS
from vkq.dispatch.config import PipelineConfig

import ggml_quant
from conftest import NMSE_GGML, assert_matches, random_ids, random_x, variant_config

INT8_TYPES = tuple(t for t, f in FORMATS.items() if f.has_int8_path)
# One plane's error is ~(1/127)^2 of x's energy per block; the residual
# plane divides it by another ~127^2. Measured: 2e-10..1e-8 against the exact
# product where one plane gives 4e-5..5e-4.
NMSE_X2_EXACT = 1e-7


def refs_x2(w64: np.ndarray, x: np.ndarray) -> dict[str, np.ndarray]:
    return {"exact": w64 @ x.astype(np.float64), "mmvq_x2": ref.matvec_model(w64, x, "mmvq", planes=2)}


def spiky_x(k: int, seed: int = 3) -> np.ndarray:
    """Normal activations with a few outliers 50x their RMS, like an LLM's."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(k) * np.where(rng.random(k) < 0.02, 50.0, 1.0)).astype(np.float32)


@pytest.fixture(scope="module")
def small(backend):
    """Per type: (Weights, float64 values) of a 37 x 1024 matrix (37: no workgroup row count divides it)."""
    cache = {}

    def get(qtype):
        if qtype not in cache:
            data = ggml_quant.random_weights(37, 1024, qtype, seed=5)
            cache[qtype] = backend.upload(qtype, (37, 1024), data), ref.dequantize(qtype, (37, 1024), data)
        return cache[qtype]
    return get


@pytest.mark.parametrize("ncols", [1, 3])
@pytest.mark.parametrize("qtype", INT8_TYPES)
def test_two_planes_match_model(backend, small, qtype, ncols):
    w, w64 = small(qtype)
    x = random_x(w64.shape[1], None if ncols == 1 else ncols, seed=ncols)
    y = backend.matvec(w, x, "mmvq", activations="q8_1x2")
    assert backend.pipeline(w, ncols, "mmvq", "q8_1x2").x_planes == 2
    assert_matches(y, refs_x2(w64, x), "mmvq_x2", f"{qtype} q8_1x2 n={ncols}")
    exact = w64 @ x.astype(np.float64)
    assert ref.nmse(y, exact) < NMSE_X2_EXACT


@pytest.mark.parametrize("qtype", INT8_TYPES)
def test_two_planes_beat_one_on_outliers(backend, small, qtype):
    """What "q8_1x2" is for: on spiky x one plane loses ~1e-4 of NMSE, two lose ~1e-8."""
    w, w64 = small(qtype)
    x = spiky_x(w64.shape[1])
    exact = w64 @ x.astype(np.float64)
    one = ref.nmse(backend.matvec(w, x, "mmvq", activations="q8_1"), exact)
    two = ref.nmse(backend.matvec(w, x, "mmvq", activations="q8_1x2"), exact)
    assert two < NMSE_X2_EXACT and two < one / 1000, (one, two)
    assert one < NMSE_GGML  # one plane still meets ggml's bound


@pytest.mark.parametrize("int_dot", [True, False], ids=["dot", "emul"])
@pytest.mark.parametrize("subgroup", [True, False], ids=["subgroup", "shared"])
@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q3_K", "Q6_K", "MXFP4"])
def test_two_plane_variants(backend, small, monkeypatch, qtype, int_dot, subgroup):
    """OpSDot and its int32 emulation, both reductions, rows split or owned."""
    w, w64 = small(qtype)
    x = random_x(w64.shape[1], 2)
    base = variant_config(backend, monkeypatch, w, "mmvq", int_dot, subgroup, ncols=2)
    for split_k in (True, False):
        cfg = dataclasses.replace(base, x_planes=2, split_k=split_k)
        assert_matches(backend.matvec(w, x, config=cfg), refs_x2(w64, x), "mmvq_x2", f"{qtype} {cfg}")


@pytest.mark.parametrize("shared_x", [True, False], ids=["shared", "per_expert"])
@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_K"])
def test_two_planes_mul_mat_id(backend, qtype, shared_x):
    n_expert, n_used, rows, k = 16, 6, 41, 512
    data = ggml_quant.random_weights(n_expert * rows, k, qtype, seed=4).reshape(n_expert, rows, -1)
    w = backend.upload(qtype, (n_expert, rows, k), data)
    ids = random_ids(n_used, n_expert)
    x = random_x(k) if shared_x else random_x(k, n_used).T.copy()
    y = backend.matvec_id(w, x, ids, "mmvq", activations="q8_1x2")
    for i, e in enumerate(ids):
        w64 = ref.dequantize(qtype, (rows, k), data[e])
        assert_matches(y[i], refs_x2(w64, x if shared_x else x[i]), "mmvq_x2", f"{qtype} slot {i} expert {e}")


def test_backend_default_activations(small, backend):
    """A backend made with activations="q8_1x2" uses them unless a call says otherwise."""
    precise = vkq.Backend(activations="q8_1x2")
    w = small("Q5_K")[0]
    w_precise = precise.upload("Q5_K", (37, 1024), ggml_quant.random_weights(37, 1024, "Q5_K", seed=5))
    x = spiky_x(1024)
    assert np.array_equal(precise.matvec(w_precise, x, "mmvq"), backend.matvec(w, x, "mmvq", activations="q8_1x2"))
    assert np.array_equal(precise.matvec(w_precise, x, "mmvq", activations="q8_1"), backend.matvec(w, x, "mmvq"))


def test_dmmv_ignores_activations(backend, small):
    w, _ = small("Q4_K")
    x = spiky_x(1024)
    assert backend.pipeline(w, 1, "dmmv", "q8_1x2").x_planes == 1
    assert np.array_equal(backend.matvec(w, x, "dmmv", activations="q8_1x2"), backend.matvec(w, x, "dmmv"))


def test_bad_activations(backend, small):
    w, _ = small("Q8_0")
    x = random_x(1024)
    with pytest.raises(ValueError, match="unknown activations 'q8_0'.*q8_1, q8_1x2"):
        backend.matvec(w, x, "mmvq", activations="q8_0")
    with pytest.raises(ValueError, match="unknown activations 'fp16'"):
        vkq.Backend(activations="fp16")
    cfg = backend.pipeline(w, 1, "mmvq")
    with pytest.raises(ValueError, match="activations or config, not both"):
        backend.matvec(w, x, activations="q8_1x2", config=cfg)
    with pytest.raises(ValueError, match="x_planes must be 1, or 2 on the mmvq path"):
        PipelineConfig("dmmv", False, True, 8, 1, x_planes=2)
    with pytest.raises(ValueError, match="x_planes must be 1, or 2"):
        dataclasses.replace(cfg, x_planes=3)
