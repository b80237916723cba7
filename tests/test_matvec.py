"""Backend.matvec against float64 references, for every block type and path.

Weights come from ggml's quantizer (uniform [-1, 1] values, like ggml's
test-backend-ops) and are dequantized by the gguf package. Each result is
checked twice (conftest.assert_matches):

- NMSE < 5e-4 against dequantize(W) @ x, ggml's bound for MUL_MAT;
- NMSE < NMSE_TIGHT against vkq.blocks.reference.matvec_model(W, x, path): for the
  int8 path that is W @ (x after vkq's Q8_1 quantization), so this checks the
  shader computes exactly what the int8 model says, up to float32 rounding.
"""
from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np
import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS, GGMLType
from vkq.dispatch.config import PipelineConfig

import ggml_quant
from conftest import (TYPES, assert_matches, force_split, paths_for, random_ids, random_x, references, type_paths,
                      variant_config, variant_params)

ROWS = (1, 7, 64, 4099)
BIG_K = (4096, 14336)


def block_k(qtype: str) -> int:
    """K of one block: 32, or 256 for the k-quants."""
    return FORMATS[qtype].block_elems


@dataclasses.dataclass
class Case:
    w: vkq.Weights
    x: np.ndarray
    refs: dict[str, np.ndarray]


# Distinct rows of a tall case: its rows are drawn at random from this many
# quantized rows, as ggml's i-quant quantizers take minutes for 4099 x 14336
# on two cores. A shader reading the wrong row still reads different values
# (a neighbour is the same row with probability 1/POOL_ROWS).
POOL_ROWS = 67


@functools.lru_cache(maxsize=1)
def grid_case(backend: vkq.Backend, qtype: str, rows: int, k: int) -> Case:
    """Weights uploaded once and dequantized once for every path of a
    (type, rows, K); the grid below lists the paths of a case one after the
    other, so one cached case is enough (and bounds the memory)."""
    pool_rows = min(rows, POOL_ROWS)
    pool = ggml_quant.random_weights(pool_rows, k, qtype, seed=rows + k)
    pick = np.arange(rows) if rows == pool_rows else np.random.default_rng(rows + k).integers(0, pool_rows, rows)
    data = pool[pick]
    x = random_x(k)
    refs = references(ref.dequantize(qtype, (pool_rows, k), pool)[pick], x)
    return Case(backend.upload(qtype, (rows, k), data), x, refs)


def _grid():
    for t in TYPES:
        for k in (block_k(t), *BIG_K):
            for rows in ROWS:
                for path in paths_for(t):
                    marks = [pytest.mark.slow] if rows * k > 4096 * 4096 else []
                    yield pytest.param(t, rows, k, path, id=f"{t}-{rows}x{k}-{path}", marks=marks)


@pytest.mark.parametrize("qtype, rows, k, path", list(_grid()))
def test_matvec_matches_reference(backend, qtype, rows, k, path):
    case = grid_case(backend, qtype, rows, k)
    y = backend.matvec(case.w, case.x, path=path)
    assert y.dtype == np.float32
    assert_matches(y, case.refs, path, f"{qtype} {rows}x{k} {path}")


@functools.lru_cache(maxsize=1)
def small_weights(backend: vkq.Backend, qtype: str, rows: int = 37, k: int = 1024):
    """(Weights, float64 values) of an odd-sized matrix."""
    data = ggml_quant.random_weights(rows, k, qtype, seed=7)
    return backend.upload(qtype, (rows, k), data), ref.dequantize(qtype, (rows, k), data)


@pytest.mark.parametrize("ncols", [1, 2, 5, 8])
@pytest.mark.parametrize("qtype, path", type_paths())
def test_several_columns(backend, qtype, path, ncols):
    w, w64 = small_weights(backend, qtype)
    x = random_x(w64.shape[1], ncols, seed=ncols)
    y = backend.matvec(w, x, path=path)
    assert y.shape == (w64.shape[0], ncols)
    assert_matches(y, references(w64, x), path, f"{qtype} {path} n={ncols}")


@pytest.mark.parametrize("ncols", [None, 3])
@pytest.mark.parametrize("qtype, path", type_paths())
def test_deterministic(backend, qtype, path, ncols):
    w, _ = small_weights(backend, qtype)
    x = random_x(w.shape[1], ncols)
    first = backend.matvec(w, x, path=path)
    assert np.array_equal(first, backend.matvec(w, x, path=path))


@pytest.mark.parametrize("qtype, path", type_paths(("Q4_0", "Q5_1", "Q3_K", "F16")))
def test_new_x_every_call(backend, qtype, path):
    """The recorded dispatches are replayed: each call must use its own x."""
    w, w64 = small_weights(backend, qtype)
    xs = [random_x(w.shape[1], seed=s) for s in (10, 11)]
    ys = [backend.matvec(w, x, path=path) for x in (xs[0], xs[1], xs[0])]
    for y, x in zip(ys, (xs[0], xs[1], xs[0])):
        assert_matches(y, references(w64, x), path, f"{qtype} {path}")
    assert np.array_equal(ys[0], ys[2])


@pytest.mark.parametrize("qtype, path", type_paths(("Q4_K", "F32")))
def test_non_contiguous_x(backend, qtype, path):
    """Strided and Fortran-ordered x give the same bits as contiguous x."""
    w, _ = small_weights(backend, qtype)
    k = w.shape[1]
    strided = random_x(2 * k)[::2]
    assert np.array_equal(backend.matvec(w, strided, path=path),
                          backend.matvec(w, np.ascontiguousarray(strided), path=path))
    fortran = np.asfortranarray(random_x(k, 4))
    assert np.array_equal(backend.matvec(w, fortran, path=path),
                          backend.matvec(w, np.ascontiguousarray(fortran), path=path))
    xt = random_x(k, 3).T.copy().T  # a transposed view
    assert np.array_equal(backend.matvec(w, xt, path=path),
                          backend.matvec(w, np.ascontiguousarray(xt), path=path))


@pytest.mark.parametrize("qtype", ["Q4_k", GGMLType.Q4_K, int(GGMLType.Q4_K)], ids=["lower", "enum", "int"])
def test_qtype_spellings(backend, qtype):
    rows, k = 5, 512
    data = ggml_quant.random_weights(rows, k, "Q4_K")
    w = backend.upload(qtype, (rows, k), data)
    assert (w.qtype, w.shape, w.nbytes) == ("Q4_K", (rows, k), data.nbytes)
    x = random_x(k)
    assert np.array_equal(backend.matvec(w, x), backend.matvec(backend.upload("Q4_K", (rows, k), data), x))


@pytest.mark.parametrize("shape", [[5, 64], np.array([5, 64]), (np.int64(5), np.int32(64))], ids=["list", "array", "np-ints"])
def test_shape_spellings(backend, shape):
    w = backend.upload("Q8_0", shape, ggml_quant.random_weights(5, 64, "Q8_0"))
    assert w.shape == (5, 64) and all(type(s) is int for s in w.shape)


@pytest.mark.parametrize("data_kind", ["numpy", "bytes"])
def test_data_as_bytes_or_array(backend, data_kind):
    data = ggml_quant.random_weights(9, 64, "Q5_0")
    w = backend.upload("Q5_0", (9, 64), data.tobytes() if data_kind == "bytes" else data)
    x = random_x(64)
    assert_matches(backend.matvec(w, x, path="dmmv"),
                   references(ref.dequantize("Q5_0", (9, 64), data), x), "dmmv", data_kind)


# -- path selection and pipeline parameters ---------------------------------

@pytest.mark.parametrize("qtype", TYPES)
def test_default_path(backend, qtype):
    """The dispatcher picks a path the type has (dmmv for F32/F16), and a
    call without a path gives that path's result."""
    w, w64 = small_weights(backend, qtype)
    path = backend.pipeline(w).path
    assert path in paths_for(qtype)
    x = random_x(w.shape[1])
    y = backend.matvec(w, x)
    assert np.array_equal(y, backend.matvec(w, x, path=path))
    assert_matches(y, references(w64, x), path, f"{qtype} default path {path}")


@pytest.mark.parametrize("env_path", ["dmmv", "mmvq", "DMMV"])
def test_env_path(backend, monkeypatch, env_path):
    """VKQ_PATH picks the path when the call does not; an explicit path wins."""
    w, _ = small_weights(backend, "Q8_0")
    x = random_x(w.shape[1])
    monkeypatch.setenv("VKQ_PATH", env_path)
    assert backend.pipeline(w).path == env_path.lower()
    assert np.array_equal(backend.matvec(w, x), backend.matvec(w, x, path=env_path.lower()))
    other = "mmvq" if env_path.lower() == "dmmv" else "dmmv"
    assert backend.pipeline(w, path=other).path == other


@pytest.mark.parametrize("qtype, path, int_dot, subgroup", variant_params())
def test_pipeline_variants(backend, monkeypatch, qtype, path, int_dot, subgroup):
    """Every compiled mat-vec variant computes its path's model: OpSDot and
    its int32 emulation, subgroupAdd and the shared-memory reduction (the
    dispatcher picks one of them per device; test_pipeline_params.py sweeps
    the launch parameters)."""
    w, w64 = small_weights(backend, qtype)
    config = variant_config(backend, monkeypatch, w, path, int_dot, subgroup, ncols=3)
    x = random_x(w.shape[1], 3)
    assert_matches(backend.matvec(w, x, config=config), references(w64, x), path, f"{qtype} {config}")


# -- big matrices and buffer splitting --------------------------------------

def dequantize_rows(qtype: str, data: np.ndarray, k: int, step: int = 1024):
    """Yield (rows slice, float64 rows): dequantize a large matrix in pieces."""
    for r0 in range(0, data.shape[0], step):
        part = data[r0:r0 + step]
        yield slice(r0, r0 + len(part)), ref.dequantize(qtype, (len(part), k), part)


def assert_rows_tiled(w: vkq.Weights) -> None:
    """The buffers' row ranges cover 0..rows in order, without overlap."""
    starts = [b.rows.start for b in w.buffers]
    counts = [b.rows.count for b in w.buffers]
    assert starts == list(np.cumsum([0] + counts[:-1])), starts
    assert sum(counts) == w.shape[-2]


@pytest.mark.slow
def test_larger_than_max_storage_buffer(backend):
    """Q8_0 9000 x 14336 is 137 MB, more than lavapipe's 128 MiB binding: split."""
    rows, k, qtype = 9000, 14336, "Q8_0"
    t0 = time.perf_counter()
    data = ggml_quant.random_weights(rows, k, qtype, seed=5)
    t_make = time.perf_counter() - t0
    assert data.nbytes > backend.device.max_buffer_bytes
    w = backend.upload(qtype, (rows, k), data)
    assert len(w.buffers) > 1
    assert_rows_tiled(w)
    x = random_x(k)
    refs = {}
    for rs, w64 in dequantize_rows(qtype, data, k):
        for name, r in references(w64, x).items():
            refs.setdefault(name, np.empty(rows))[rs] = r
    del data
    for path in ("dmmv", "mmvq"):
        assert_matches(backend.matvec(w, x, path=path), refs, path, f"{qtype} {rows}x{k} {path}")
    print(f"made {rows}x{k} {qtype} in {t_make:.1f} s, {len(w.buffers)} buffers")


SPLIT_TYPES = ("Q4_0", "Q8_0", "Q4_K", "Q6_K", "MXFP4", "F16", "IQ2_S", "IQ1_M")  # IQ: a grid per buffer


@pytest.mark.parametrize("qtype, path", type_paths(SPLIT_TYPES))
def test_forced_split(backend, monkeypatch, qtype, path):
    """37 rows in buffers of 10: 10 + 10 + 10 + 7, same bits as one buffer."""
    rows, k = 37, 2 * block_k(qtype)
    data = ggml_quant.random_weights(rows, k, qtype, seed=4)
    whole = backend.upload(qtype, (rows, k), data)
    force_split(monkeypatch, qtype, 1, 10, k)
    split = backend.upload(qtype, (rows, k), data)
    assert [(b.rows.start, b.rows.count) for b in split.buffers] == [(0, 10), (10, 10), (20, 10), (30, 7)]
    w64 = ref.dequantize(qtype, (rows, k), data)
    for x in (random_x(k), random_x(k, 3)):
        y = backend.matvec(split, x, path=path)
        assert_matches(y, references(w64, x), path, f"{qtype} split {path}")
        assert np.array_equal(y, backend.matvec(whole, x, path=path))


@pytest.mark.parametrize("qtype, path", type_paths(SPLIT_TYPES))
def test_forced_split_experts(backend, monkeypatch, qtype, path):
    """MUL_MAT_ID on an expert stack split by rows: 37 rows in buffers of 16."""
    n_expert, rows, k = 6, 37, block_k(qtype)
    data = ggml_quant.random_weights(n_expert * rows, k, qtype, seed=6).reshape(n_expert, rows, -1)
    force_split(monkeypatch, qtype, n_expert, 16, k)
    w = backend.upload(qtype, (n_expert, rows, k), data)
    assert [(b.rows.start, b.rows.count) for b in w.buffers] == [(0, 16), (16, 16), (32, 5)]
    ids = random_ids(8, n_expert)
    w64 = ref.dequantize(qtype, (len(ids), rows, k), data[ids])
    for x in (random_x(k), random_x(k, len(ids)).T.copy()):
        y = backend.matvec_id(w, x, ids, path=path)
        assert y.shape == (len(ids), rows)
        for i in range(len(ids)):
            xi = x if x.ndim == 1 else x[i]
            assert_matches(y[i], references(w64[i], xi), path, f"{qtype} split slot {i} expert {ids[i]}")


def test_one_row_larger_than_buffer(backend, monkeypatch):
    monkeypatch.setattr(vkq.device.runtime.Device, "max_buffer_bytes", property(lambda self: 1000))
    data = ggml_quant.random_weights(2, 4096, "Q8_0")
    with pytest.raises(ValueError, match="maxStorageBufferRange"):
        backend.upload("Q8_0", (2, 4096), data)


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_more_than_65535_workgroups(backend, path):
    """600000 rows at 2 rows per workgroup: 300000 workgroups, more than one
    grid dimension guarantees (65535), for matvec and for an expert stack."""
    rows, k, qtype = 600_000, 32, "Q4_0"
    config = PipelineConfig(path, path == "mmvq", True, wg_size=8, rows_per_wg=2, source="test")
    data = ggml_quant.random_weights(rows, k, qtype, seed=8)
    w64 = ref.dequantize(qtype, (rows, k), data)
    x = random_x(k, 2)
    w = backend.upload(qtype, (rows, k), data)
    assert_matches(backend.matvec(w, x, config=config), references(w64, x), path, f"{rows} rows {path}")

    experts = backend.upload(qtype, (2, rows // 2, k), data)
    ids = np.array([1, 0, 1], np.int32)
    y = backend.matvec_id(experts, x[:, 0], ids, config=config)
    for i, e in enumerate(ids):
        assert_matches(y[i], references(w64.reshape(2, rows // 2, k)[e], x[:, 0]), path, f"expert {e} {path}")


# -- F32 / F16 rows of any length -------------------------------------------

@pytest.mark.parametrize("k", [1, 100, 4097])
@pytest.mark.parametrize("qtype, dtype", [("F32", np.float32), ("F16", np.float16)], ids=["F32", "F16"])
def test_plain_types_any_k(backend, qtype, dtype, k):
    """K need not be a multiple of 32: rows are padded on the device. The data
    may be given in its own dtype (float32 / float16) or as raw bytes."""
    rows = 7
    values = np.random.default_rng(k).uniform(-1, 1, (rows, k)).astype(dtype)
    w64 = values.astype(np.float64)
    for data in (values, values.view(np.uint8), values.tobytes()):
        w = backend.upload(qtype, (rows, k), data)
        assert w.nbytes == values.nbytes
        for ncols in (None, 5):
            x = random_x(k, ncols)
            assert_matches(backend.matvec(w, x), references(w64, x), "dmmv", f"{qtype} K={k}")
