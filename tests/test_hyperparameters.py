"""Hyper-parameters read as llama.cpp reads them (its llama-model.cpp
load_hparams), or refused in one line naming the key where vkq would run
what llama.cpp does not (or would run it otherwise):

- RoPE scaling: {arch}.rope.scaling.factor, else the older
  {arch}.rope.scale_linear (0: none); the type linear where
  {arch}.rope.scaling.type is missing, "none" ignores the factor, "yarn" and
  "longrope" scale otherwise (refused with a factor), a type llama.cpp does
  not know is refused;
- {arch}.block_count against the layers the file has tensors of, either way;
- a llama file whose {arch}.rope.dimension_count is not the head size
  (llama.cpp: "invalid n_rot"); Qwen's partial RoPE stays allowed.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from conftest import assert_model_file_refused
from tiny_llama import TINY, write_gguf
from tiny_qwen import write_qwen
from vkq.llama.host import LlamaModel
from vkq.llama.model import LlamaFile

HEAD = TINY["n_embd"] // TINY["n_head"]
IDS = [30, 71, 200, 5, 99, 140, 17, 3, 222, 64, 9]  # 11 positions: far enough for scaled angles to differ


@pytest.mark.parametrize("metadata, scale", [
    ({"llama.rope.scaling.factor": 3.0}, 3.0),  # no type: linear
    ({"llama.rope.scale_linear": 2.5}, 2.5),  # the older key
    ({"llama.rope.scaling.factor": 6.0, "llama.rope.scale_linear": 2.5}, 6.0),  # the newer key first
    ({"llama.rope.scaling.type": "linear", "llama.rope.scale_linear": 1.5}, 1.5),
    ({"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": 3.0}, 1.0),  # "none" never scales
    ({"llama.rope.scaling.factor": 0.0}, 1.0),  # 0: no scaling
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 1.0}, 1.0),  # yarn at factor 1: none
    ({}, 1.0),
])
def test_rope_scaling_keys(tmp_path, metadata, scale):
    f = LlamaFile(write_gguf(tmp_path / "scaled.gguf", metadata=metadata))
    assert f.config.rope_scale == scale
    np.testing.assert_allclose(f.inv_freq, 10000.0 ** (-np.arange(HEAD // 2) / (HEAD // 2)) / scale, rtol=1e-12)


def test_a_factor_without_a_type_decodes_as_linear(tmp_path):
    """The logits of a file with a factor and no type are those of the same
    file with the type "linear", bit for bit, and not the unscaled ones."""
    def logits(name, metadata):
        return LlamaModel(write_gguf(tmp_path / name, metadata=metadata), path_mode="numpy").logits(IDS)
    bare = logits("bare.gguf", {"llama.rope.scale_linear": 5.0})
    linear = logits("linear.gguf", {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 5.0})
    assert bare.tobytes() == linear.tobytes()
    assert not np.allclose(bare, logits("plain.gguf", {}), atol=1e-4)


V = gguf.GGUFValueType
REFUSED = {
    "yarn factor 2": ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 2.0},
                      r"RoPE scaling 'yarn' \(llama\.rope\.scaling\.type\) is not supported: vkq scales RoPE linearly "
                      r"only \(llama\.rope\.scaling\.factor is 2\)"),
    "longrope, old key": ({"llama.rope.scaling.type": "longrope", "llama.rope.scale_linear": 8.0},
                          r"RoPE scaling 'longrope' .*\(llama\.rope\.scale_linear is 8\)"),
    "unknown type": ({"llama.rope.scaling.type": "dynamic"},
                     r"llama\.rope\.scaling\.type is 'dynamic'; llama\.cpp knows none, linear, yarn, longrope"),
    "type not a string": ({"llama.rope.scaling.type": 1}, r"llama\.rope\.scaling\.type is 1;"),
    "negative factor": ({"llama.rope.scaling.factor": -2.0}, r"llama\.rope\.scaling\.factor is -2; expected"),
    "nan scale_linear": ({"llama.rope.scale_linear": float("nan")}, r"llama\.rope\.scale_linear is nan; expected"),
    "factor a string": ({"llama.rope.scaling.factor": "4"}, r"llama\.rope\.scaling\.factor is '4'; expected"),
    "fewer layers declared": ({"llama.block_count": 1},
                              r"llama\.block_count is 1, but the file has tensors of 2 layers"),
    "llama rope over part of a head": ({"llama.rope.dimension_count": 10},
                                       rf"llama\.rope\.dimension_count is 10, but the heads are {HEAD} wide "
                                       r"\(llama\.attention\.key_length, or llama\.embedding_length / "
                                       r"llama\.attention\.head_count\); a llama model rotates whole heads"),
}


@pytest.mark.parametrize("what", list(REFUSED))
def test_refused_in_one_line(tmp_path, capsys, what):
    metadata, match = REFUSED[what]
    assert_model_file_refused(write_gguf(tmp_path / "bad.gguf", metadata=metadata), match, capsys)


def test_more_layers_declared_than_present_is_still_refused(tmp_path, capsys):
    assert_model_file_refused(write_gguf(tmp_path / "bad.gguf", metadata={"llama.block_count": 3}),
                              r"llama\.block_count is 3, but the file has tensors of 2 layers", capsys)


def test_qwen_keeps_its_partial_rope(tmp_path):
    f = LlamaFile(write_qwen(tmp_path / "partial.gguf", "qwen3", metadata={"qwen3.rope.dimension_count": 24}))
    assert (f.config.n_rot, f.config.head_dim) == (24, 64)
