"""The steps `vkq bench` times: all the weight products of a model, recorded once, replayed.

Each step is one `vkq.Graph`. Stage after stage (see `Model.stages`) the
stage's matrices multiply the stage's input; inputs are synthetic
activations (fixed random values, one tensor per input size), so a step
measures the weight products alone: no attention, norms or sampling.
Because of that, no stage reads what the one before wrote, and the graph
would let them all run at once; in a real model each stage depends on the
previous one, so a step puts a barrier between stages. The logits are read
back, as a decoder would.

- `DecodeStep` (tg): one token's mat-vecs. The ids of the selected experts
  go to the device first; every int8 mat-vec of a stage reads one Q8_1
  quantization of its input (the graph shares it).
- `PromptStep` (pp): one prompt of n tokens. Every matrix multiplies n
  columns through the tiled mat-mat (`Graph.matmul(tiled=True)`,
  shaders/mul_mm.comp), the kernel a prompt's chunks run on, except the
  output head: a prompt needs only its last token's logits (llama.cpp's
  prompt does the same), so the head is a mat-vec of one column. As in
  DecodeStep, the int8 path quantizes each input to Q8_1 once per step.
  A mixture-of-experts model has no prompt step yet (`prompt_unsupported`).
"""
from __future__ import annotations

import numpy as np

from ..backend import Backend
from ..dispatch.paths import PATH_REQUESTS, resolve_path
from ..tensor import Tensor
from ..weights import Weights
from .presets import OUTPUT, Matrix, Model

STEP_PATHS = PATH_REQUESTS


class _Step:
    """What both steps share: the graph, its synthetic inputs, and which
    pipeline each matrix runs (`configs`). `run()` replays it once, for
    `n_tokens` tokens."""

    n_tokens = 1

    def __init__(self, backend: Backend, timestamps: bool):
        self.graph = backend.graph(timestamps)
        self.inputs: dict[tuple[int, int], Tensor] = {}  # (vectors, K) -> synthetic input
        self.outputs: dict[str, Tensor] = {}  # matrix name -> y
        self.configs: dict[str, object] = {}  # matrix name -> its PipelineConfig (mat-vec) or TileConfig (mat-mat)

    def _input(self, backend: Backend, n_vectors: int, k: int, every_run: bool) -> Tensor:
        """The synthetic input of n_vectors x K; every_run: uploaded at every replay
        (a graph input), else once, at the first."""
        key = (n_vectors, k)
        if key not in self.inputs:
            t = self.inputs[key] = backend.tensor(k, n_vectors, name=f"x{k}")
            t.write(np.random.default_rng(k).uniform(-1, 1, t.shape).astype(np.float32))
            if every_run:
                self.graph.input(t)
        return self.inputs[key]

    def run(self) -> None:
        """The whole recorded step (one submit)."""
        self.graph.run()

    def kernel_seconds(self) -> float | None:
        """GPU time of the last run's kernels (a step made with
        timestamps=True on a device that has them), else None."""
        return self.graph.kernel_seconds


class DecodeStep(_Step):
    """The recorded decode step of one model on one path; `run()` is one token.

    path: "auto" (the dispatcher's choice per matrix), "dmmv", or "mmvq"
    (the int8 path where the type has one; vkq.dispatch.paths)."""

    def __init__(self, backend: Backend, model: Model, weights: dict[str, Weights], path: str = "auto",
                 seed: int = 0, timestamps: bool = False):
        super().__init__(backend, timestamps)
        self.model = model
        self.rng = np.random.default_rng(seed)
        g = self.graph
        # One ids tensor per MoE layer, shared by its expert stacks.
        self.n_expert = {m.layer: m.shape[0] for m in model.matrices if m.is_expert_stack}
        self.ids = {layer: g.input(backend.tensor(model.n_expert_used, dtype=np.int32, name=f"ids.{layer}"))
                    for layer in self.n_expert}
        for i, stage in enumerate(model.stages()):
            if i:
                g.barrier()
            self._record_stage(backend, stage, weights, path)
        self.logits = g.output(self.outputs[model.matrices[-1].name])

    def _record_stage(self, backend: Backend, stage: list[Matrix], weights: dict[str, Weights], path: str) -> None:
        ws = [weights[m.name] for m in stage]
        k = ws[0].layout.k
        assert all(w.layout.k == k for w in ws), "a stage's matrices share one input"
        n_vectors = self.model.n_expert_used if stage[0].per_expert_input else 1
        x = self._input(backend, n_vectors, k, every_run=True)
        for m, w in zip(stage, ws):
            p = resolve_path(w.layout.fmt, path)
            if m.is_expert_stack:
                self.outputs[m.name] = self.graph.matvec_id(w, x, self.ids[m.layer], p)
            else:
                self.outputs[m.name] = self.graph.matvec(w, x, p)
            self.configs[m.name] = self.graph.matvecs[-1][1]

    def draw_ids(self) -> None:
        """New experts for every MoE layer: top-k distinct of n_expert, at random."""
        for layer, ids in self.ids.items():
            ids.write(self.rng.permutation(self.n_expert[layer])[: self.model.n_expert_used].astype(np.int32))

    def run(self) -> None:
        """One token: new expert ids, then the whole recorded step (one submit)."""
        self.draw_ids()
        super().run()


def prompt_unsupported(model: Model) -> str | None:
    """Why `PromptStep` cannot record this model, or None."""
    stacks = [m.name for m in model.matrices if m.is_expert_stack]
    if stacks:
        return (f"a prompt of a mixture-of-experts model needs MUL_MAT_ID over many tokens, which vkq.Graph "
                f"does not have yet ({stacks[0]} is an expert stack)")
    return None


class PromptStep(_Step):
    """The recorded weight products of one prompt of `n_prompt` tokens on one
    path (as DecodeStep's); `run()` is the whole prompt, one submit.

    The inputs go to the device once (a prompt's activations are made on the
    device, not uploaded). Each matrix's output is one tensor per stage
    position and size, rewritten layer after layer: a step keeps one layer's
    outputs, not the whole model's (n_prompt columns each)."""

    def __init__(self, backend: Backend, model: Model, weights: dict[str, Weights], path: str = "auto",
                 n_prompt: int = 512, timestamps: bool = False):
        why = prompt_unsupported(model)
        if why:
            raise ValueError(f"{model.name}: {why}")
        super().__init__(backend, timestamps)
        self.model, self.n_tokens = model, n_prompt
        g = self.graph
        scratch: dict[tuple[int, int, int], Tensor] = {}  # (position in stage, rows, columns) -> y
        for i, stage in enumerate(model.stages()):
            if i:
                g.barrier()
            for j, m in enumerate(stage):
                w = weights[m.name]
                head = m.role == OUTPUT
                n = 1 if head else n_prompt
                x = self._input(backend, n, w.layout.k, every_run=False)
                key = (j, w.layout.rows, n)
                if key not in scratch:
                    scratch[key] = backend.tensor(w.layout.rows, n, name=f"y{j}.{w.layout.rows}")
                p = resolve_path(w.layout.fmt, path)
                if head:
                    self.outputs[m.name] = g.matvec(w, x, p, out=scratch[key])
                    self.configs[m.name] = g.matvecs[-1][1]
                else:
                    self.outputs[m.name] = g.matmul(w, x, p, out=scratch[key], tiled=True)
                    self.configs[m.name] = g.nodes[-1][1].cfg  # the TileConfig its MatMul runs
        self.logits = g.output(self.outputs[model.matrices[-1].name])
