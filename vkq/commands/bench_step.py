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
  shaders/mul_mm.comp), the kernel a prompt's chunks run on, and every
  expert stack the n tokens' used experts (`Graph.matmul_id`), except the
  output head: a prompt needs only its last token's logits (llama.cpp's
  prompt does the same), so the head is a mat-vec of one column. As in
  DecodeStep, the int8 path quantizes each input to Q8_1 once per step.
"""
from __future__ import annotations

import numpy as np

from ..backend import Backend
from ..dispatch.paths import PATH_REQUESTS, resolve_path
from ..dispatch.tiles import TileConfig
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


def _tiles_of_last_node(graph) -> TileConfig:
    """The TileConfig the graph's last node (a mat-mat) runs: its op's `cfg`."""
    keep = graph.nodes[-1][1]
    return next(node.cfg for node in (keep if isinstance(keep, tuple) else (keep,))
                if isinstance(getattr(node, "cfg", None), TileConfig))


class PromptStep(_Step):
    """The recorded weight products of one prompt of `n_prompt` tokens on one
    path (as DecodeStep's); `run()` is the whole prompt, one submit.

    The inputs go to the device once (a prompt's activations are made on the
    device, not uploaded), and so do the experts each token uses: drawn once,
    top-k distinct of n_expert per token at random (over a prompt's many
    tokens every expert gets its share of them, as a router spreads them;
    drawing them anew for each run would put host work into the timing).
    Each matrix's output is one tensor per stage position and size,
    rewritten layer after layer: a step keeps one layer's outputs, not the
    whole model's (n_prompt columns each)."""

    def __init__(self, backend: Backend, model: Model, weights: dict[str, Weights], path: str = "auto",
                 n_prompt: int = 512, seed: int = 0, timestamps: bool = False):
        super().__init__(backend, timestamps)
        self.model, self.n_tokens = model, n_prompt
        g, n_used = self.graph, model.n_expert_used
        rng = np.random.default_rng(seed)
        self.ids: dict[int, Tensor] = {}  # MoE layer -> the experts of each token, (n_prompt, n_used)
        for m in model.matrices:
            if m.is_expert_stack and m.layer not in self.ids:
                t = self.ids[m.layer] = backend.tensor(n_used, n_prompt, dtype=np.int32, name=f"ids.{m.layer}")
                experts = np.tile(np.arange(m.shape[0], dtype=np.int32), (n_prompt, 1))
                t.write(rng.permuted(experts, axis=1)[:, :n_used])
        scratch: dict[tuple[int, int, int], Tensor] = {}  # (position in stage, rows, vectors) -> y
        for i, stage in enumerate(model.stages()):
            if i:
                g.barrier()
            for j, m in enumerate(stage):
                w = weights[m.name]
                head = m.role == OUTPUT
                n_x = 1 if head else n_prompt * n_used if m.per_expert_input else n_prompt
                n_y = n_prompt * n_used if m.is_expert_stack else n_x
                x = self._input(backend, n_x, w.layout.k, every_run=False)
                key = (j, w.layout.rows, n_y)
                if key not in scratch:
                    scratch[key] = backend.tensor(w.layout.rows, n_y, name=f"y{j}.{w.layout.rows}")
                p = resolve_path(w.layout.fmt, path)
                if head:
                    self.outputs[m.name] = g.matvec(w, x, p, out=scratch[key])
                    self.configs[m.name] = g.matvecs[-1][1]
                    continue
                if m.is_expert_stack:
                    self.outputs[m.name] = g.matmul_id(w, x, self.ids[m.layer], p, out=scratch[key])
                else:
                    self.outputs[m.name] = g.matmul(w, x, p, out=scratch[key], tiled=True)
                self.configs[m.name] = _tiles_of_last_node(g)
        self.logits = g.output(self.outputs[model.matrices[-1].name])
