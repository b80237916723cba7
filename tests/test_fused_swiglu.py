"""SwiGLU fused into the gate|up mat-vec (Graph.matvec's glu, shaders/mul_mat_vec.comp's GLU).

- Every block type and path, n = 1, 3 and 8 columns, an odd output count:
  the fused result is the bits of the SwiGLU op over the unfused mat-vec's
  output, and within float32 rounding of float64 numpy;
- every launch a GPU table can pick (splitting K over a workgroup, odd rows
  per workgroup rounded up to pairs): the same bits;
- what it refuses, with a message: an odd row count, weights split over
  buffers, an explicit config with odd rows per workgroup;
- in a model: the decode step has one dispatch fewer per dense layer, and
  --no-fuse (gate and up apart) keeps the SwiGLU op.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vkq.blocks.formats import FORMATS

from vkq.llama.gpu_step import GpuLlama
from vkq.llama.vector_ops import SwiGLU, Vectors

import vkq.blocks.reference as ref
from conftest import force_split
from test_gpu_table_configs import gpu_configs
from tiny_llama import write_gguf

N_FF = 37  # outputs: odd, and not a multiple of any launch's rows


def k_for(qtype: str) -> int:
    return 256 if FORMATS[qtype].block_elems <= 256 else FORMATS[qtype].block_elems


def gate_up(backend, qtype, n_ff=N_FF, seed=0):
    from vkq.blocks.synthetic import random_weights

    k = k_for(qtype)
    data = random_weights(FORMATS[qtype], 2 * n_ff, k, np.random.default_rng(seed))
    return backend.upload(qtype, (2 * n_ff, k), data), data


def fused_and_apart(backend, w, x_host, path=None, config=None):
    """(fused, SwiGLU over the unfused output) for x_host (n, K), in one graph."""
    n, n_ff = x_host.shape[0], w.layout.rows // 2
    x = backend.tensor(w.layout.k, n)
    x.write(x_host)
    g = backend.graph()
    g.input(x)
    y = g.matvec(w, x, path, config=config)
    apart = backend.tensor(n_ff, n)
    g.add(SwiGLU(backend.device, Vectors(y, n_ff), Vectors(y, n_ff, n_ff), Vectors(apart, n_ff), n))
    fused = g.matvec(w, x, path, config=config, glu=True)
    g.output(apart)
    g.output(fused)
    g.run()
    return fused.read().reshape(n, n_ff), apart.read().reshape(n, n_ff)


@pytest.mark.parametrize("qtype, path", [(t, p) for t in FORMATS for p in FORMATS[t].paths])
def test_fused_is_swiglu_of_the_matvec(backend, qtype, path):
    w, data = gate_up(backend, qtype)
    k = w.layout.k
    x = np.random.default_rng(1).uniform(-1, 1, (8, k)).astype(np.float32)
    for n in (1, 3, 8):
        fused, apart = fused_and_apart(backend, w, x[:n], path)
        assert fused.tobytes() == apart.tobytes(), f"n={n}"
    wf = ref.dequantize(qtype, (2 * N_FF, k), data).astype(np.float64)
    gu = x.astype(np.float64) @ wf.T
    g, u = gu[:, :N_FF], gu[:, N_FF:]
    with np.errstate(over="ignore"):  # exp(-g) of a large negative g: inf, and silu 0
        assert ref.nmse(fused, g / (1 + np.exp(-g)) * u) < 5e-4


@pytest.mark.parametrize("qtype", ["F16", "Q4_0", "Q4_K"])
def test_every_gpu_table_launch(backend, qtype):
    w, _ = gate_up(backend, qtype, seed=2)
    x = np.random.default_rng(3).uniform(-1, 1, (3, w.layout.k)).astype(np.float32)
    for cfg in gpu_configs(qtype, 1).values():
        cfg = replace(cfg, rows_per_wg=cfg.rows_per_wg + cfg.rows_per_wg % 2)
        fused, apart = fused_and_apart(backend, w, x, config=cfg)
        assert fused.tobytes() == apart.tobytes(), cfg


def test_odd_rows_per_workgroup_go_in_pairs(backend, monkeypatch):
    w, _ = gate_up(backend, "Q4_0")
    cfg = backend.pipeline(w, 1, "dmmv")
    odd = replace(cfg, rows_per_wg=3)
    with pytest.raises(ValueError, match="rows_per_wg must be even, got 3"):
        fused_and_apart(backend, w, np.ones((1, w.layout.k), np.float32), config=odd)
    # the dispatcher's choice is rounded up, named in the source
    from vkq.resolve import resolve

    monkeypatch.setattr(backend.dispatcher, "choose", lambda *a, **kw: odd)
    w._configs.clear()
    cfg = resolve(backend, w, 1, "dmmv", glu=True)
    assert cfg.rows_per_wg == 4 and "gate and up rows in pairs" in cfg.source


def test_refusals(backend, monkeypatch):
    w, _ = gate_up(backend, "Q4_0")
    x = backend.tensor(w.layout.k)
    g = backend.graph()
    odd = backend.upload("Q4_0", (7, 256), np.zeros(7 * 144, np.uint8))
    with pytest.raises(ValueError, match="gate and up matrices of equal rows"):
        g.matvec(odd, x, glu=True)
    force_split(monkeypatch, "Q4_0", 1, 16, 256)
    split = backend.upload("Q4_0", (2 * N_FF, 256), np.zeros(2 * N_FF * 144, np.uint8))
    assert len(split.buffers) > 1
    with pytest.raises(ValueError, match="in one weights buffer"):
        g.matvec(split, x, glu=True)


def test_a_model_step_fuses_its_dense_layers(backend, tmp_path):
    path = write_gguf(tmp_path / "tiny.gguf")
    fused = GpuLlama(path, backend, "auto", ctx=8)
    apart = GpuLlama(path, backend, "auto", ctx=8, fuse=False)
    n_layer = fused.config.n_layer
    labels = [label for label in fused.graph._labels if "swiglu" in label.lower()]
    assert len(labels) == n_layer and all(label.startswith("ffn_gate+ffn_up+swiglu ") for label in labels)
    assert sum(label == "SwiGLU" for label in apart.graph._labels) == n_layer
    ids = fused.tokenizer.encode("the theory")
    assert fused.logits(ids).tobytes() == apart.logits(ids).tobytes()
