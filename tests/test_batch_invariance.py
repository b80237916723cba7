"""Batch invariance: a column's result does not depend on how many columns
share the call, bit for bit (vkq.dispatch.choose.Dispatcher.choose).

- On this device: every block type and path, the dispatcher's own choice,
  n = 2..8 columns against each column alone; MUL_MAT_ID slots against each
  expert alone; and every launch a GPU table can pick, run at one and at
  several columns with the same parameters;
- on every recorded device (tests/devices/) and every type, path and model
  shape: the dispatcher's choice at n = 2..8 sums in the order of its choice
  at n = 1 (`PipelineConfig.summation`), even where its rules pick another
  path or split for n > 1 (then the source says that the order was kept).

- on the decoders: every architecture (vkq.llama.architectures), both
  engines: a step over several tokens (feed_rows: speculative decoding's
  verifying step, a prompt's mat-vec chunks) gives each row the logits of
  its token fed alone, bit for bit; a prompt through the mat-mats gives the
  same logits whatever its chunks (-ub).

What breaks it elsewhere: ggml-vulkan's n > 1 path flips greedy tokens
against n = 1 (llama.cpp PR 28489), and with it speculative decoding and a
prompt processed in chunks.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vkq.blocks.formats import FORMATS
from vkq.blocks.synthetic import random_weights
from vkq.device.caps import DeviceCaps
from vkq.device.device_info import DeviceInfo
from vkq.dispatch.choose import Dispatcher
from vkq.dispatch.classify import classify
from vkq.resolve import MAX_COLS

import ggml_quant
from test_gpu_table_configs import gpu_configs
from tiny_llama import write_gguf
from tiny_gemma import write_gemma
from tiny_gpt_oss import write_gpt_oss
from tiny_phi3 import write_phi3
from tiny_qwen import write_qwen
from vkq.llama.architectures import ARCHITECTURES
from vkq.llama.gpu_step import GpuLlama
from vkq.llama.host import LlamaModel

DEVICES = Path(__file__).parent / "devices"
# (rows, K) of the matrices of the models vkq runs: SmolLM2's, Llama 3's, an output head
SHAPES = [(576, 576), (1536, 576), (576, 1536), (4096, 4096), (14336, 4096), (4096, 14336), (49152, 576)]


def k_for(qtype: str) -> int:
    return 512 if FORMATS[qtype].block_elems <= 256 else FORMATS[qtype].block_elems * 2


# One block type of each decoder family in the default suite; every other type
# in make test-slow (each column count is a pipeline of its own to build on
# lavapipe: 5-15 s a type).
FAMILIES = ("F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ2_XXS", "IQ4_NL", "MXFP4")


@pytest.mark.parametrize("qtype, path", [pytest.param(t, p, marks=() if t in FAMILIES else pytest.mark.slow)
                                         for t in FORMATS for p in FORMATS[t].paths])
def test_columns_alone_and_together(backend, qtype, path):
    rows, k = 37, k_for(qtype)
    w = backend.upload(qtype, (rows, k), random_weights(FORMATS[qtype], rows, k, np.random.default_rng(5)))
    x = np.random.default_rng(6).uniform(-1, 1, (k, MAX_COLS)).astype(np.float32)
    alone = [backend.matvec(w, x[:, j], path) for j in range(MAX_COLS)]
    for n in range(2, MAX_COLS + 1):
        together = backend.matvec(w, np.ascontiguousarray(x[:, :n]), path)
        for j in range(n):
            assert together[:, j].tobytes() == alone[j].tobytes(), f"column {j} of {n}"


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_mul_mat_id_slots_alone_and_together(backend, path):
    n_expert, rows, k = 6, 33, 256
    data = ggml_quant.random_weights(n_expert * rows, k, "Q4_K", seed=7)
    w = backend.upload("Q4_K", (n_expert, rows, k), data)
    x = np.random.default_rng(8).uniform(-1, 1, (5, k)).astype(np.float32)
    ids = np.array([5, 0, 3, 3, 1], np.int32)
    together = backend.matvec_id(w, x, ids, path)
    shared = backend.matvec_id(w, x[0], ids, path)
    for s in range(len(ids)):
        alone = backend.matvec_id(w, x[s:s + 1], ids[s:s + 1], path)[0]
        assert together[s].tobytes() == alone.tobytes()
        assert shared[s].tobytes() == backend.matvec_id(w, x[0], ids[s:s + 1], path)[0].tobytes()


@pytest.mark.parametrize("qtype", ["F16", "Q4_0", "Q4_K", "IQ4_XS", "Q6_K"])
def test_every_gpu_table_launch_is_column_invariant(backend, qtype):
    rows, k = 45, 2048
    w = backend.upload(qtype, (rows, k), ggml_quant.random_weights(rows, k, qtype, seed=11))
    x = np.random.default_rng(3).uniform(-1, 1, (k, 4)).astype(np.float32)
    for cfg in gpu_configs(qtype, 1).values():
        together = backend.matvec(w, x, config=cfg)
        for j in range(4):
            assert together[:, j].tobytes() == backend.matvec(w, x[:, j], config=cfg).tobytes(), cfg


def recorded_dispatchers() -> list:
    out = []
    for path in sorted(DEVICES.glob("*.json")):
        info = DeviceInfo.from_dict(json.loads(path.read_text()))
        caps = DeviceCaps.of(info, int_dot=info.integer_dot_product)
        out.append(pytest.param(Dispatcher(caps, classify(info), {}), id=path.stem))
    return out


@pytest.mark.parametrize("dispatcher", recorded_dispatchers())
def test_one_summation_order_per_matrix_on_every_device(dispatcher):
    kept = 0
    for qtype, fmt in FORMATS.items():
        for rows, k in SHAPES:
            if not fmt.is_plain and k % fmt.block_elems:
                continue
            for path in (None,) + fmt.paths:
                for activations in ("q8_1", "q8_1x2"):
                    one = dispatcher.choose(fmt, rows, k, 1, path, activations)
                    for n in range(2, MAX_COLS + 1):
                        cfg = dispatcher.choose(fmt, rows, k, n, path, activations)
                        assert cfg.summation == one.summation, (qtype, rows, k, path, n, cfg.source)
                        kept += "summation order, kept" in cfg.source
    print(f"{kept} choices kept one column's order against their rules")


# A tiny model of every architecture the decoder runs (and llama's mixture of experts).
TINY_MODELS = {"llama": lambda path: write_gguf(path), "llama-moe": lambda path: write_gguf(path, experts=(6, 2)),
               **{arch: (lambda path, arch=arch: write_qwen(path, arch)) for arch in ("qwen2", "qwen3", "qwen3moe")},
               **{arch: (lambda path, arch=arch: write_gemma(path, arch, scale=2.5)) for arch in ("gemma2", "gemma3")},
               "phi3": lambda path: write_phi3(path, scale=2.5), "gpt-oss": lambda path: write_gpt_oss(path, scale=2.5)}
# The rows test in the default suite for these, slow for the others (the sliding windows': gemma2's graph engine;
# gpt-oss's sinks and expert biases: its graph engine)
ROWS_FAST = {(m, e) for m in ("llama", "llama-moe", "qwen2", "qwen3", "qwen3moe") for e in ("graph", "host")} | {
    ("gemma2", "graph"), ("gpt-oss", "graph")}


def test_every_architecture_has_a_tiny_model():
    assert set(ARCHITECTURES) <= set(TINY_MODELS), "a tiny model for each architecture, for the test below"


@pytest.mark.parametrize("model, engine", [
    pytest.param(m, e, id=f"{m}-{name}", marks=() if (m, name) in ROWS_FAST else pytest.mark.slow)
    for m in TINY_MODELS for name, e in (("graph", GpuLlama), ("host", LlamaModel))])
def test_decoder_rows_equal_one_token_at_a_time(backend, tmp_path, model, engine):
    """After a 3-token prompt, 5 tokens in one step: each row is the bits of
    the logits of its token fed alone (greedy's, with or without drafts;
    Gemma's rows past its window of 5 positions)."""
    d = engine(TINY_MODELS[model](tmp_path / f"{model}.gguf"), backend, "auto", ctx=16)
    ids = d.tokenizer.encode("then the 12 thieves")[:8]
    d.feed(ids[:3], False)
    _, rows = d.feed_rows(ids[3:])
    d.reset()
    d.feed(ids[:3], False)
    for i, token in enumerate(ids[3:]):
        assert d.feed_one(token)[1].tobytes() == rows[i].tobytes(), f"row {i} of {len(rows)}"


@pytest.mark.parametrize("model, engine", [
    pytest.param(m, e, id=f"{m}-{name}", marks=() if (m, name) == ("qwen3", "host") else pytest.mark.slow)
    for m in TINY_MODELS for name, e in (("graph", GpuLlama), ("host", LlamaModel))])
def test_decoder_prompt_cut_any_way_gives_the_same_logits(backend, tmp_path, model, engine):
    """A prompt through the mat-mats (-ub) in chunks of 1 and of 4 tokens:
    the same logits, bit for bit (qwen3's per-head norms on the host engine
    in the default suite; the rest slow, a few seconds each on lavapipe)."""
    path = TINY_MODELS[model](tmp_path / f"{model}.gguf")
    first = engine(path, backend, "auto", ctx=16, prompt_chunk=1, prompt_kernels="matmul")
    ids = first.tokenizer.encode("then the 12 thieves")[:9]
    cut = engine(None, backend, "auto", ctx=16, prompt_chunk=4, prompt_kernels="matmul", file=first.file)
    assert first.logits(ids).tobytes() == cut.logits(ids).tobytes()
