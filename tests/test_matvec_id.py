"""Backend.matvec_id (MUL_MAT_ID): y[i] = experts[ids[i]] @ x, or @ x[i].

Each output row is checked on its own against the float64 product of the
selected expert (dequantized by gguf) with its input, like test_matvec.py:
NMSE < 5e-4 against the exact product and < NMSE_TIGHT against the path's
model (conftest.assert_matches).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS

import ggml_quant
from conftest import (assert_matches, paths_for, random_ids, random_x, references, type_paths, variant_config,
                      variant_params)

MOE_TYPES = ("Q4_0", "Q8_0", "Q4_K", "Q6_K", "MXFP4", "Q2_K")
# (n_expert, n_used, rows, K), like the qwen3-30b-a3b shapes of ggml's perf tests, smaller
MOE_SHAPES = {"8of32": (32, 8, 130, 512), "8of128": (128, 8, 64, 256)}
X_KINDS = ("shared", "per_expert")


@dataclasses.dataclass
class Experts:
    w: vkq.Weights
    data: np.ndarray  # uint8 (n_expert, rows, row_bytes), GGUF order

    def values(self, ids: np.ndarray) -> np.ndarray:
        """float64 (len(ids), rows, K) of the selected experts."""
        _, rows, k = self.w.shape
        return ref.dequantize(self.w.qtype, (len(ids), rows, k), self.data[ids])


def make_experts(backend: vkq.Backend, qtype: str, n_expert: int, rows: int, k: int, seed: int = 0) -> Experts:
    data = ggml_quant.random_weights(n_expert * rows, k, qtype, seed).reshape(n_expert, rows, -1)
    w = backend.upload(qtype, (n_expert, rows, k), data)
    assert w.is_expert_stack and w.shape == (n_expert, rows, k)
    return Experts(w, data)


cached_experts = functools.lru_cache(maxsize=1)(make_experts)


def make_x(kind: str, n_used: int, k: int, seed: int = 1) -> np.ndarray:
    return random_x(k, seed=seed) if kind == "shared" else random_x(k, n_used, seed).T.copy()


def assert_rows_match(y: np.ndarray, experts: Experts, x: np.ndarray, ids: np.ndarray, path: str, what: str):
    """Row i of y is experts[ids[i]] @ (x or x[i])."""
    assert y.shape == (len(ids), experts.w.shape[1]), f"{what}: shape {y.shape}"
    w64 = experts.values(ids)
    for i, e in enumerate(ids):
        xi = x if x.ndim == 1 else x[i]
        assert_matches(y[i], references(w64[i], xi), path, f"{what} slot {i} (expert {e})")


def _moe_params():
    for t in MOE_TYPES:
        for shape_id in MOE_SHAPES:
            for kind in X_KINDS:
                for path in paths_for(t):
                    yield pytest.param(t, shape_id, kind, path, id=f"{t}-{shape_id}-{kind}-{path}")


@pytest.mark.parametrize("qtype, shape_id, x_kind, path", list(_moe_params()))
def test_matvec_id_matches_reference(backend, qtype, shape_id, x_kind, path):
    n_expert, n_used, rows, k = MOE_SHAPES[shape_id]
    experts = cached_experts(backend, qtype, n_expert, rows, k)
    ids = random_ids(n_used, n_expert)
    x = make_x(x_kind, n_used, k)
    y = backend.matvec_id(experts.w, x, ids, path=path)
    assert y.dtype == np.float32
    assert_rows_match(y, experts, x, ids, path, f"{qtype} {shape_id} {x_kind} {path}")


@pytest.mark.parametrize("x_kind", X_KINDS)
@pytest.mark.parametrize("qtype, path", type_paths())
def test_every_type_small(backend, qtype, path, x_kind):
    """ggml's MUL_MAT_ID case for all types, used > n_expert: 8 of 4 experts,
    rows 64, K three blocks."""
    n_expert, n_used, rows, k = 4, 8, 64, 3 * FORMATS[qtype].block_elems
    experts = cached_experts(backend, qtype, n_expert, rows, k)
    ids = random_ids(n_used, n_expert)
    x = make_x(x_kind, n_used, k)
    assert_rows_match(backend.matvec_id(experts.w, x, ids, path=path), experts, x, ids, path,
                      f"{qtype} {x_kind} {path}")


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_ids_and_x_change_between_calls(backend, path):
    """Recorded dispatches are replayed: each call uses its own ids and x."""
    n_expert, rows, k = 16, 40, 256
    experts = make_experts(backend, "Q4_K", n_expert, rows, k, seed=3)
    calls = [(np.array(ids, np.int32), random_x(k, seed=s)) for ids, s in
             (([0, 1, 2, 3], 1), ([15, 15, 15, 15], 2), ([7, 0, 15, 7], 3), ([0, 1, 2, 3], 1))]
    ys = [backend.matvec_id(experts.w, x, ids, path=path) for ids, x in calls]
    for y, (ids, x) in zip(ys, calls):
        assert_rows_match(y, experts, x, ids, path, f"ids {ids.tolist()}")
    assert np.array_equal(ys[0], ys[3])


@pytest.mark.parametrize("n_used", [1, 3, 8])
@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_n_used(backend, path, n_used):
    """Any number of used experts, with per-expert and shared x on one stack."""
    n_expert, rows, k = 8, 33, 64
    experts = cached_experts(backend, "Q5_1", n_expert, rows, k)
    ids = random_ids(n_used, n_expert, seed=n_used)
    for kind in X_KINDS:
        x = make_x(kind, n_used, k, seed=n_used)
        assert_rows_match(backend.matvec_id(experts.w, x, ids, path=path), experts, x, ids, path,
                          f"n_used={n_used} {kind}")


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_deterministic(backend, path):
    n_expert, n_used, rows, k = MOE_SHAPES["8of32"]
    experts = cached_experts(backend, "Q4_0", n_expert, rows, k)
    ids = random_ids(n_used, n_expert)
    x = make_x("per_expert", n_used, k)
    first = backend.matvec_id(experts.w, x, ids, path=path)
    assert np.array_equal(first, backend.matvec_id(experts.w, x, ids, path=path))


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_same_as_matvec_on_one_expert(backend, path):
    """Slot i of matvec_id gives the same bits as matvec on expert ids[i] alone."""
    n_expert, rows, k = 5, 37, 512
    experts = make_experts(backend, "Q6_K", n_expert, rows, k, seed=9)
    ids = np.array([4, 0, 2], np.int32)
    x = random_x(k)
    y = backend.matvec_id(experts.w, x, ids, path=path)
    for i, e in enumerate(ids):
        alone = backend.upload("Q6_K", (rows, k), experts.data[e])
        assert np.array_equal(y[i], backend.matvec(alone, x, path=path)), f"slot {i} expert {e}"


@pytest.mark.parametrize("qtype, path, int_dot, subgroup", variant_params())
def test_pipeline_variants(backend, monkeypatch, qtype, path, int_dot, subgroup):
    """Every compiled MUL_MAT_ID variant computes its path's model (see
    test_matvec.py::test_pipeline_variants)."""
    n_expert, n_used, rows, k = 4, 8, 37, 2 * FORMATS[qtype].block_elems
    experts = cached_experts(backend, qtype, n_expert, rows, k)
    config = variant_config(backend, monkeypatch, experts.w, path, int_dot, subgroup)
    ids = random_ids(n_used, n_expert)
    for kind in X_KINDS:
        x = make_x(kind, n_used, k)
        assert_rows_match(backend.matvec_id(experts.w, x, ids, config=config), experts, x, ids, path,
                          f"{qtype} {kind} {config}")
