"""One decode step of a model: all its mat-vecs, recorded once, replayed per token.

The step is one `vkq.Graph`: the ids of the selected experts go to the
device, then stage after stage (see `Model.stages`) the stage's mat-vecs
run on the stage's input; every int8 mat-vec of a stage reads one Q8_1
quantization of it (the graph shares it). Inputs are synthetic activations
(fixed random values, one tensor per input size), so the step measures the
mat-vec share of decoding: no attention, norms or sampling. Because of
that, no stage reads what the one before wrote, and the graph would let
them all run at once; in a real decode each stage depends on the previous
one, so the step puts a barrier between stages. The logits are read back,
as a decode loop would.
"""
from __future__ import annotations

import numpy as np

from ..backend import Backend
from ..dispatch.paths import PATH_REQUESTS, resolve_path
from ..tensor import Tensor
from ..weights import Weights
from .presets import Matrix, Model

STEP_PATHS = PATH_REQUESTS


class DecodeStep:
    """The recorded decode step of one model on one path; `run()` is one token.

    path: "auto" (the dispatcher's choice per matrix), "dmmv", or "mmvq"
    (the int8 path where the type has one; vkq.dispatch.paths)."""

    def __init__(self, backend: Backend, model: Model, weights: dict[str, Weights], path: str = "auto",
                 seed: int = 0, timestamps: bool = False):
        self.model = model
        self.rng = np.random.default_rng(seed)
        self.graph = g = backend.graph(timestamps)
        self.inputs: dict[tuple[int, int], Tensor] = {}  # (vectors, K) -> synthetic input
        self.outputs: dict[str, Tensor] = {}  # matrix name -> y
        self.configs: dict[str, object] = {}  # matrix name -> the PipelineConfig it runs

        # One ids tensor per MoE layer, shared by its expert stacks.
        self.n_expert = {m.layer: m.shape[0] for m in model.matrices if m.is_expert_stack}
        self.ids = {layer: g.input(backend.tensor(model.n_expert_used, dtype=np.int32, name=f"ids.{layer}"))
                    for layer in self.n_expert}
        for i, stage in enumerate(model.stages()):
            if i:
                g.barrier()
            self._record_stage(backend, stage, weights, path)
        self.logits = g.output(self.outputs[model.matrices[-1].name])

    def _input(self, backend: Backend, n_vectors: int, k: int) -> Tensor:
        key = (n_vectors, k)
        if key not in self.inputs:
            t = self.inputs[key] = backend.tensor(k, n_vectors, name=f"x{k}")
            t.write(np.random.default_rng(k).uniform(-1, 1, t.shape).astype(np.float32))
            self.graph.input(t)
        return self.inputs[key]

    def _record_stage(self, backend: Backend, stage: list[Matrix], weights: dict[str, Weights], path: str) -> None:
        ws = [weights[m.name] for m in stage]
        k = ws[0].layout.k
        assert all(w.layout.k == k for w in ws), "a stage's matrices share one input"
        n_vectors = self.model.n_expert_used if stage[0].per_expert_input else 1
        x = self._input(backend, n_vectors, k)
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
        self.graph.run()

    def kernel_seconds(self) -> float | None:
        """GPU time of the last token's kernels (a step made with
        timestamps=True on a device that has them), else None."""
        return self.graph.kernel_seconds
