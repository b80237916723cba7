"""vkq: quantized matrix-vector products on any Vulkan GPU, driven from Python."""
from .backend import MAX_COLS, Backend, Weights
from .formats import FORMATS, get_format
from .gguf_io import GGUFTensor, load_gguf

__all__ = ["Backend", "Weights", "FORMATS", "get_format", "load_gguf", "GGUFTensor", "MAX_COLS"]
__version__ = "0.1.0"
