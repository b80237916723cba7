"""How the shaders read their inputs: weights and x as storage buffers or
through uniform texel buffer views. Every combination gives the same bits as
plain storage buffers (the arithmetic is the same; only the loads differ),
and a texel view that would exceed the device's limit falls back to
storage, visibly in the config's `source`."""
from dataclasses import replace

import numpy as np
import pytest

import ggml_quant
from conftest import TYPES, assert_matches, paths_for, random_ids, random_x, references
from vkq.blocks import reference as ref
from vkq.dispatch.choose import fit_bindings
from vkq.dispatch.config import PipelineConfig
from vkq.resolve import resolve

BINDINGS = [("texel", "storage"), ("storage", "texel"), ("texel", "texel")]
ROWS, K = 37, 1024  # 37: not a multiple of the rows per workgroup


def config(path: str, split_k: bool, weights_binding="storage", x_binding="storage") -> PipelineConfig:
    return PipelineConfig(path, path == "mmvq", True, wg_size=8, rows_per_wg=4, chunks_per_thread=8,
                          split_k=split_k, weights_binding=weights_binding, x_binding=x_binding, source="test")


@pytest.fixture(scope="module")
def matrices(backend):
    out = {}
    for qtype in TYPES:
        data = ggml_quant.random_weights(ROWS, K, qtype, seed=11)
        out[qtype] = backend.upload(qtype, (ROWS, K), data), ref.dequantize(qtype, (ROWS, K), data)
    return out


@pytest.mark.parametrize("split_k", [True, False], ids=["splitk", "rows"])
@pytest.mark.parametrize("qtype, path", [pytest.param(t, p, id=f"{t}-{p}") for t in TYPES for p in paths_for(t)])
def test_bindings_same_bits(backend, matrices, qtype, path, split_k):
    w, w64 = matrices[qtype]
    x = random_x(K, 3)
    storage = backend.matvec(w, x, config=config(path, split_k))
    assert_matches(storage, references(w64, x), path, f"{qtype} {path} storage")
    for weights_binding, x_binding in BINDINGS:
        cfg = config(path, split_k, weights_binding, x_binding)
        y = backend.matvec(w, x, config=cfg)
        assert np.array_equal(y, storage), f"{qtype} {path} weights {weights_binding}, x {x_binding}"


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_bindings_mul_mat_id(backend, path):
    """MUL_MAT_ID: the texel views come after the ids binding."""
    n_expert, rows, k, qtype = 5, 19, 512, "Q4_K"
    data = ggml_quant.random_weights(n_expert * rows, k, qtype, seed=3).reshape(n_expert, rows, -1)
    w = backend.upload(qtype, (n_expert, rows, k), data)
    ids = random_ids(6, n_expert)
    x = random_x(k, len(ids)).T.copy()
    storage = backend.matvec_id(w, x, ids, config=config(path, True))
    y = backend.matvec_id(w, x, ids, config=config(path, True, "texel", "texel"))
    assert np.array_equal(y, storage)
    w64 = ref.dequantize(qtype, (len(ids), rows, k), data[ids])
    for i in range(len(ids)):
        assert_matches(y[i], references(w64[i], x[i]), path, f"slot {i}")


def test_several_columns_of_a_long_row(backend):
    """8 fp32 columns of K=4096 (128 KiB of x) through one texel view."""
    k, ncols = 4096, 8
    data = ggml_quant.random_weights(ROWS, k, "Q4_0", seed=2)
    w = backend.upload("Q4_0", (ROWS, k), data)
    x = random_x(k, ncols)
    y = backend.matvec(w, x, config=config("dmmv", True, "texel", "texel"))
    assert np.array_equal(y, backend.matvec(w, x, config=config("dmmv", True)))
    assert_matches(y, references(ref.dequantize("Q4_0", (ROWS, k), data), x), "dmmv", "8 columns")


def test_fit_bindings_limits(backend):
    caps = backend.device.caps
    cfg = config("mmvq", True, "texel", "texel")
    assert fit_bindings(cfg, caps, 1024, 4096) == cfg
    small = replace(caps, max_texel_buffer_elements=1000)
    fitted = fit_bindings(cfg, small, 16 * 1001, 4 * 1001)
    assert (fitted.weights_binding, fitted.x_binding) == ("storage", "storage")
    assert fitted.source.count("maxTexelBufferElements") == 2
    assert fit_bindings(cfg, small, 16 * 1000, 4 * 1000) == cfg


def test_weights_over_the_texel_limit_fall_back(backend, monkeypatch):
    """A device whose texel buffers hold fewer texels than a weights buffer
    has words reads the weights as storage, with the same bits."""
    data = ggml_quant.random_weights(ROWS, K, "Q5_K", seed=9)
    w = backend.upload("Q5_K", (ROWS, K), data)
    x = random_x(K)
    expected = backend.matvec(w, x, config=config("mmvq", True, "texel", "texel"))
    words = max(b.tensor.size() for b in w.buffers)
    caps = replace(backend.device.caps, max_texel_buffer_elements=words - 1)
    monkeypatch.setattr(backend.device, "caps", caps)
    w._calls.clear()
    w._calls_by_config.clear()
    fitted = resolve(backend, w, 1, config=config("mmvq", True, "texel", "texel"))
    assert fitted.weights_binding == "storage" and "maxTexelBufferElements" in fitted.source
    assert np.array_equal(backend.matvec(w, x, config=config("mmvq", True, "texel", "texel")), expected)


@pytest.mark.parametrize("kind", ["sampler", "uniform"])  # uniform buffers: no shader of vkq's uses them
def test_unknown_binding_kind_is_refused(backend, kind):
    dev = backend.device
    x, y = dev.tensor(32), dev.tensor(32)
    from vkq.device.shader_variants import QUANTIZE_Q8_1
    with pytest.raises(RuntimeError, match="binding kind"):
        dev.algorithm([x, y], QUANTIZE_Q8_1, (1, 1, 1), [64, 1], np.zeros(3, np.uint32), ["storage", kind])
