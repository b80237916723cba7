"""Text generation from Python: a llama GGUF model on one of vkq's engines
(`vkq.load_model`; `vkq generate` loads its models here, with the same
defaults).

Engines:
- "graph" (default): the whole decode step on the device, recorded once and
  replayed per token with one submit (vkq.llama.gpu_step);
- "host": every weight mat-vec a Backend.matvec call, the vector ops in numpy
  (vkq.llama.host);
- path "numpy": the float64 reference of the host decoder, no device.
"""
from __future__ import annotations

from pathlib import Path

from ..backend import Backend
from ..blocks.activations import GENERATE_ACTIVATIONS
from .decoding import Decoder
from .gpu_step import GpuLlama
from .host import PATH_MODES, LlamaModel
from .model import LlamaFile

ENGINES = ("graph", "host")


def load_model(model: str | Path, *, engine: str = "graph", path: str = "auto",
               activations: str = GENERATE_ACTIVATIONS, ctx: int | None = None, fuse: bool = True,
               backend: Backend | None = None, device: int | None = None, file: LlamaFile | None = None,
               timestamps: bool = False, profile: bool = False, spread: bool = True,
               fold: bool = True, launches: str | None = None, prompt_chunk: int | None = None,
               prompt_kernels: str | None = None) -> Decoder:
    """A llama GGUF model (a path) ready to generate text, greedily:

        import vkq
        model = vkq.load_model(vkq.example_model())   # engine "graph", a context of 512 positions
        text, token_ids, stats = model.generate("The capital of France is", 32)
        print(text)
        print(stats.summary())                         # prompt and decode speed
        model.generate("Paris is", 16)                  # (the KV cache starts empty every time)

    The decoder (vkq.llama.decoding.Decoder) also has `greedy(token_ids, n)`,
    `logits(token_ids)` and `score`; its `tokenizer` encodes and decodes text.

    engine: "graph" or "host"; path: the mat-vec path, "auto" (the
    dispatcher's), "dmmv", "mmvq", or "numpy" (the float64 reference, on no
    device, whatever the engine); activations: the int8 path's
    (vkq.blocks.activations); ctx: the positions the KV cache holds (default
    vkq.llama.config.DEFAULT_CONTEXT, 512, or the model's context length
    where shorter: LlamaConfig.default_context);
    fuse: the matrices of one stage stacked into one mat-vec; backend or
    device: where to run (default: a new Backend on VKQ_DEVICE or device 0);
    file: the model already parsed (vkq.llama.model.LlamaFile).
    For the graph engine only: timestamps (time its kernels), profile (and
    keep every op's time), spread (its one-workgroup ops spread over a GPU),
    fold (ops folded into the dispatch before them),
    launches (a GPU class's launches): vkq.llama.gpu_step.GpuLlama. For
    either engine on a device: prompt_chunk (a prompt's tokens per chunk)
    and prompt_kernels ("matmul" or "matvec": the kernels of a prompt's
    chunks; default the device's)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    if path not in PATH_MODES:
        raise ValueError(f"unknown path {path!r}; expected one of {', '.join(PATH_MODES)}")
    if profile and (engine == "host" or path == "numpy"):
        raise ValueError("a profile times the ops of the graph engine's step: --profile needs --engine graph "
                         "and a device path")
    for flag, given in (("--no-spread", not spread), ("--no-fold", not fold), ("--shape", launches is not None)):
        if given and (engine == "host" or path == "numpy"):
            raise ValueError(f"{flag} sets how the graph engine runs its step: it needs --engine graph "
                             "and a device path")
    for flag, given in (("-ub", prompt_chunk is not None), ("--prompt-kernels", prompt_kernels is not None)):
        if given and path == "numpy":
            raise ValueError(f"{flag} chooses a device's kernels for the prompt: not with path numpy (the reference)")
    if file is None:
        file = LlamaFile(model, fuse)
    if ctx is None:
        ctx = file.config.default_context()
    if engine == "host" or path == "numpy":
        return LlamaModel(model, backend, path, activations=activations, fuse=fuse, device=device, ctx=ctx, file=file,
                          prompt_chunk=prompt_chunk, prompt_kernels=prompt_kernels)
    return GpuLlama(model, backend, path, activations=activations, fuse=fuse, device=device, ctx=ctx, file=file,
                    timestamps=timestamps, profile=profile, spread=spread, fold=fold, launches=launches,
                    prompt_chunk=prompt_chunk, prompt_kernels=prompt_kernels)
