"""What a Python user meets first: every public name in dir(vkq), and reprs
that say what an object is in one line."""
from __future__ import annotations

import numpy as np

import vkq


def test_dir_lists_the_lazy_names():
    """Backend, Graph, Tensor and Weights are imported on first use; dir()
    and tab completion list them all the same."""
    names = dir(vkq)
    assert set(vkq.__all__) <= set(names)
    assert {"Backend", "Graph", "Tensor", "Weights", "MAX_COLS"} <= set(names)


def test_backend_repr_names_its_device(backend):
    assert repr(backend) == (f"<vkq.Backend device {backend.device_info.index}: {backend.device_info.name}, "
                             f"activations={backend.activations}>")


def test_gguf_tensor_repr_is_one_line():
    """Not the dataclass's, which prints the memory map's values."""
    t = vkq.GGUFTensor("blk.0.ffn_up.weight", "Q8_0", (4, 64), np.zeros(4 * 68, np.uint8))
    assert repr(t) == "GGUFTensor(name='blk.0.ffn_up.weight', qtype='Q8_0', shape=(4, 64), 272 bytes)"


def test_a_loaded_model_repr_says_what_it_is(tiny):
    """vkq.load_model's decoder: its file, architecture, context and engine (was `<...GpuLlama object at 0x...>`)."""
    model = vkq.load_model(tiny, ctx=16)
    text = repr(model)
    assert text.startswith(f"<vkq GpuLlama {tiny.name}: llama, {model.config.n_layer} layers, context 16; "
                           "engine graph, path auto") and text.endswith(">") and "\n" not in text
