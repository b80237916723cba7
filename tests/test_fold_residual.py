"""The residual add folded into the mat-vec that produces it (Graph.matvec's
accumulate, shaders/mul_mat_vec.comp's ACCUMULATE; GpuLlama's fold).

- out += W x: the bits of the unfused mat-vec's output added to out in
  numpy float32, and within float32 rounding of float64 numpy, on both
  paths, 1 and several columns, the device's launch and every GPU table's
  (split K), weights over several buffers; replayed, out is re-read, not
  added twice;
- what it refuses, with a message: MUL_MAT_ID, glu, no out, a non-bool;
- in a model: fold on and off give the same logits and tokens (decode
  steps, a prompt through the mat-vecs in chunks, feed_rows; a dense and a
  mixture-of-experts model), with the same dispatches per token while the
  dense layers' norms no longer read a residual;
- SwiGLU fused into a mixture-of-experts layer's gate|up MUL_MAT_ID
  (Graph.matvec_id's glu, behind fold): the bits of the SwiGLU op over the
  unfused MUL_MAT_ID's slots, and in the tiny MoE model with stacked gate|up
  experts fold on and off agree, the SwiGLU op gone with fold on.
"""
from __future__ import annotations

import numpy as np
import pytest

import vkq.blocks.reference as ref
from vkq.blocks.formats import FORMATS
from vkq.blocks.synthetic import random_weights
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.vector_ops import RMSNorm, SwiGLU, Vectors
from vkq.ops import MatVec

from conftest import NMSE_GGML, force_split
from test_gpu_table_configs import gpu_configs
from tiny_llama import write_gguf

ROWS, K = 37, 256  # an odd row count: not a multiple of any launch's rows


def weights(backend, qtype, rows=ROWS, seed=0):
    data = random_weights(FORMATS[qtype], rows, K, np.random.default_rng(seed))
    return backend.upload(qtype, (rows, K), data), data


def folded_and_apart(backend, w, x_host, r_host, path=None, config=None):
    """(out after out += W x, r + (W x) added in numpy float32) for x_host (n, K) and r_host (n, rows),
    replayed twice (out goes up from the host at each replay)."""
    n = x_host.shape[0]
    x = backend.tensor(w.layout.k, n)
    out = backend.tensor(w.layout.rows, n)
    g = backend.graph()
    g.input(x)
    g.input(out)
    y = g.matvec(w, x, path, config=config)
    assert g.matvec(w, x, path, config=config, out=out, accumulate=True) is out
    g.output(y)
    g.output(out)
    x.write(x_host if n > 1 else x_host[0])
    for _ in range(2):
        out.write(r_host if n > 1 else r_host[0])
        g.run()
    wx = y.read().reshape(n, -1)
    return out.read().reshape(n, -1), r_host + wx


# Default suite: a plain type and a small-block type on both paths, a k-quant on the int8 path (a pipeline's
# build is most of a case's time on lavapipe); the rest -m slow.
FAST = {("F16", "dmmv"), ("Q4_0", "dmmv"), ("Q4_0", "mmvq"), ("Q4_K", "mmvq")}


@pytest.mark.parametrize("qtype, path", [pytest.param(t, p, marks=() if (t, p) in FAST else pytest.mark.slow)
                                         for t in ("F16", "Q4_0", "Q4_K", "Q6_K") for p in FORMATS[t].paths])
def test_accumulate_is_the_product_added(backend, qtype, path):
    w, data = weights(backend, qtype)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (8, K)).astype(np.float32)
    r = rng.uniform(-4, 4, (8, ROWS)).astype(np.float32)
    w64 = ref.dequantize(qtype, (ROWS, K), data).astype(np.float64)
    for n in (1, 3):
        folded, apart = folded_and_apart(backend, w, x[:n], r[:n], path)
        assert folded.dtype == apart.dtype == np.float32
        assert folded.tobytes() == apart.tobytes(), f"n={n}"
        assert ref.nmse(folded, r[:n] + x[:n].astype(np.float64) @ w64.T) < NMSE_GGML


@pytest.mark.parametrize("qtype", ["Q4_0", pytest.param("Q4_K", marks=pytest.mark.slow)])
def test_every_gpu_table_launch(backend, qtype):
    w, _ = weights(backend, qtype, seed=2)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (3, K)).astype(np.float32)
    r = rng.uniform(-1, 1, (3, ROWS)).astype(np.float32)
    configs = gpu_configs(qtype, 3)
    assert any(cfg.split_k for cfg in configs.values())  # (the reduction's write, not only a thread's own)
    for cfg in configs.values():
        folded, apart = folded_and_apart(backend, w, x, r, config=cfg)
        assert folded.tobytes() == apart.tobytes(), cfg


def test_weights_over_several_buffers(backend, monkeypatch):
    force_split(monkeypatch, "Q4_0", 1, 16, K)
    w, _ = weights(backend, "Q4_0", seed=4)
    assert len(w.buffers) > 1
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (2, K)).astype(np.float32)
    r = rng.uniform(-1, 1, (2, ROWS)).astype(np.float32)
    folded, apart = folded_and_apart(backend, w, x, r)
    assert folded.tobytes() == apart.tobytes()


def test_refusals(backend):
    w, _ = weights(backend, "Q4_0", rows=2 * 18)
    x = backend.tensor(K)
    out = backend.tensor(w.layout.rows)
    g = backend.graph()
    with pytest.raises(ValueError, match="accumulate adds W x into `out`: give out"):
        g.matvec(w, x, accumulate=True)
    with pytest.raises(ValueError, match="accumulate takes a plain mat-vec: a fused SwiGLU"):
        g.matvec(w, x, out=backend.tensor(18), glu=True, accumulate=True)
    with pytest.raises(TypeError, match="accumulate must be True or False"):
        g.matvec(w, x, out=out, accumulate=1)
    assert g.counts["matvec"] == 0 and not g.nodes  # refused before anything was recorded
    cfg = backend.pipeline(w, 1, "dmmv")
    ids = backend.tensor(2, dtype=np.int32)
    with pytest.raises(ValueError, match="accumulate .* takes a plain mat-vec, not MUL_MAT_ID"):
        MatVec(backend.device, w, cfg, x.kp, out.kp, ids=ids.kp, n_slots=2, accumulate=True)


def norms_reading_a_residual(decoder) -> int:
    """The decode step's norms that read a residual besides x."""
    return sum(isinstance(op, RMSNorm) and len(op.reads) > 2 for _, op in decoder.graph.nodes)


def residual_streams(decoder) -> int:
    """The decode step's residual-stream tensors (a norm that adds a residual writes the other one)."""
    return sum(t.name in ("x0", "x1") for t in decoder.graph._tensors.values())


def assert_fold_changes_no_bits(path, backend, dense: bool, path_mode: str = "auto", decoders=None):
    """decoders: (fold on, fold off) of the file at path, made already."""
    kw = dict(ctx=32, prompt_kernels="matvec")
    on, off = decoders or tuple(GpuLlama(path, backend, path_mode, fold=fold, **kw) for fold in (True, False))
    n_layer = on.config.n_layer
    if decoders is None:  # (only the residual folds: each norm stays a dispatch)
        assert on.graph.dispatch_counts()[0] == off.graph.dispatch_counts()[0]
    # (without fold, every norm but the first layer's attn_norm adds a residual)
    assert norms_reading_a_residual(off) == 2 * n_layer
    # (MoE: the norms after an FFN still add the experts' weighted slots)
    assert norms_reading_a_residual(on) == (0 if dense else n_layer)
    assert (residual_streams(on), residual_streams(off)) == ((1 if dense else 2), 2)
    prompt = on.tokenizer.encode("the theory that the three then-")  # 19 tokens: chunks of MAX_COLS and a rest
    assert len(prompt) % on.prompt_chunk
    for dec in (on, off):
        dec.reset()
    first = [dec.feed(prompt) for dec in (on, off)]
    assert first[0][0] == first[1][0] and first[0][1].tobytes() == first[1][1].tobytes()
    token = first[0][0]
    for _ in range(3):
        steps = [dec.feed_one(token) for dec in (on, off)]
        assert steps[0][0] == steps[1][0] and steps[0][1].tobytes() == steps[1][1].tobytes()
        token = steps[0][0]
    rows = [dec.feed_rows(prompt[:3]) for dec in (on, off)]
    assert np.array_equal(rows[0][0], rows[1][0]) and rows[0][1].tobytes() == rows[1][1].tobytes()


@pytest.mark.parametrize("path_mode", ["auto", "dmmv"])  # (auto: the int8 path)
def test_a_dense_model_gives_the_same_bits(backend, tmp_path, path_mode):
    assert_fold_changes_no_bits(write_gguf(tmp_path / "tiny.gguf", scale=4.0), backend, dense=True,
                                path_mode=path_mode)


def test_a_moe_model_gives_the_same_bits(backend, tmp_path):
    assert_fold_changes_no_bits(write_gguf(tmp_path / "moe.gguf", experts=(8, 2), scale=4.0), backend,
                                dense=False)


@pytest.mark.parametrize("qtype, path", [("Q4_0", "dmmv"), ("Q4_0", "mmvq"),
                                         pytest.param("Q4_K", "mmvq", marks=pytest.mark.slow)])
def test_swiglu_fused_into_mul_mat_id(backend, qtype, path):
    n_expert, n_ff, ids_host = 4, 19, np.array([3, 0, 3, 1, 2, 0], np.int32)  # 3 tokens, 2 experts each
    data = random_weights(FORMATS[qtype], n_expert * 2 * n_ff, K, np.random.default_rng(6))
    w = backend.upload(qtype, (n_expert, 2 * n_ff, K), data)
    x_host = np.random.default_rng(7).uniform(-1, 1, (3, K)).astype(np.float32)
    n_slots = ids_host.size
    x, ids = backend.tensor(K, 3), backend.tensor(n_slots, dtype=np.int32)
    x.write(x_host)
    ids.write(ids_host)
    g = backend.graph()
    y = g.matvec_id(w, x, ids, path)
    apart = backend.tensor(n_ff, n_slots)
    g.add(SwiGLU(backend.device, Vectors(y, n_ff), Vectors(y, n_ff, n_ff), Vectors(apart, n_ff), n_slots))
    fused = g.matvec_id(w, x, ids, path, glu=True)
    assert (fused.length, fused.n) == (n_ff, n_slots)
    g.output(apart)
    g.output(fused)
    g.run()
    assert fused.read().tobytes() == apart.read().tobytes()
    w64 = ref.dequantize(qtype, (n_expert * 2 * n_ff, K), data).astype(np.float64).reshape(n_expert, 2 * n_ff, K)
    gu = np.stack([w64[e] @ x_host[s // 2] for s, e in enumerate(ids_host)])
    gate, up = gu[:, :n_ff], gu[:, n_ff:]
    assert ref.nmse(fused.read().reshape(n_slots, n_ff), gate / (1 + np.exp(-gate)) * up) < NMSE_GGML


def test_a_moe_model_fuses_swiglu_into_its_experts_with_fold(backend, tmp_path):
    # (gate and up experts of one type: one stacked MUL_MAT_ID group per layer)
    path = write_gguf(tmp_path / "moe.gguf", experts=(8, 2), expert_types={"ffn_up_exps": "Q8_0"}, scale=4.0)
    on, off = (GpuLlama(path, backend, "auto", fold=fold, ctx=32, prompt_kernels="matvec") for fold in (True, False))
    n_layer = on.config.n_layer
    labels = [label for label in on.graph._labels if label.startswith("ffn_gate_exps+ffn_up_exps")]
    assert len(labels) == n_layer and all(label.startswith("ffn_gate_exps+ffn_up_exps+swiglu ") for label in labels)
    assert sum(label == "SwiGLU" for label in on.graph._labels) == 0
    assert sum(label == "SwiGLU" for label in off.graph._labels) == n_layer
    assert_fold_changes_no_bits(path, backend, dense=False, decoders=(on, off))
