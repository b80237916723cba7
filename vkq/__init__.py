"""vkq: quantized matrix-vector products on any Vulkan GPU, driven from Python."""
from .blocks.formats import FORMATS, get_format
from .blocks.gguf_io import GGUFTensor, load_gguf
from .example import example_model

__all__ = ["Backend", "Weights", "Graph", "Tensor", "FORMATS", "get_format", "load_gguf", "GGUFTensor", "MAX_COLS",
           "example_model", "load_model", "DraftModel", "Sampling"]
__version__ = "0.1.0"

# Imported on first use: they load Kompute and the Vulkan loader, which
# `vkq --version`, `vkq --help` and the CLI's error report must not need.
_LAZY = {"Backend": "backend", "Weights": "weights", "MAX_COLS": "resolve", "Graph": "graph", "Tensor": "tensor",
         "load_model": "llama.loading", "DraftModel": "llama.draft", "Sampling": "llama.sampling"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'vkq' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too (tab completion, dir(vkq)), without importing them."""
    return sorted({*globals(), *_LAZY})
