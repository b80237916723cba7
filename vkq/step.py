"""One decode step of a model: all its mat-vecs, recorded once, replayed per token.

The step is one Kompute sequence: the ids of the selected experts go to the
device, then stage after stage (see `Model.stages`) the stage's input is
quantized to Q8_1 once if any of its matrices takes the int8 path, and its
mat-vecs run; a barrier separates each stage from the next, because in a
real decode each stage reads what the one before produced. Inputs are
synthetic activations (fixed random values, one tensor per input size), so
the step measures the mat-vec share of decoding: no attention, norms or
sampling. The logits are read back, as a decode loop would.

The dispatches are `vkq.ops.MatVec` and `QuantizeQ8_1`, the same ones
`Backend.matvec` replays, bound to the step's own tensors.
"""
from __future__ import annotations

import kp
import numpy as np

from .backend import Backend, Weights
from .dispatch.config import PipelineConfig
from .models import Matrix, Model
from .ops import MatVec, QuantizeQ8_1, q8_1_words
from .timing import timestamp_span

STEP_PATHS = ("auto", "dmmv", "mmvq")


def step_config(backend: Backend, w: Weights, path: str) -> PipelineConfig:
    """auto: the dispatcher's choice; mmvq falls back to dmmv where a type has
    no int8 path (F32/F16, e.g. an MoE router)."""
    if path not in STEP_PATHS:
        raise ValueError(f"unknown path {path!r}; expected one of {', '.join(STEP_PATHS)}")
    if path == "auto":
        return backend.pipeline(w, 1, None)
    if path == "mmvq" and not w.layout.fmt.has_int8_path:
        path = "dmmv"
    return backend.pipeline(w, 1, path)


class _Ops:
    """Ops recorded before the sequence exists: a sequence with timestamps
    needs their number up front (one timestamp after each)."""

    def __init__(self):
        self.ops: list = []

    def record(self, op) -> "_Ops":
        self.ops.append(op)
        return self


class DecodeStep:
    """The recorded decode step of one model on one path; `run()` is one token."""

    def __init__(self, backend: Backend, model: Model, weights: dict[str, Weights], path: str = "auto",
                 seed: int = 0):
        dev = self.device = backend.device
        self.model = model
        self.rng = np.random.default_rng(seed)
        self.configs = {m.name: step_config(backend, weights[m.name], path) for m in model.matrices}
        self.inputs: dict[tuple[int, int], object] = {}  # (vectors, k_pad) -> fp32 tensor
        self.quantized: dict[tuple[int, int], object] = {}  # (vectors, k_pad) -> Q8_1 tensor
        self.outputs: dict[str, object] = {}  # matrix name -> y tensor
        self._ops: list = []  # keeps the recorded algorithms alive with the sequence

        # One ids tensor per MoE layer, shared by its expert stacks.
        self.n_expert = {m.layer: m.shape[0] for m in model.matrices if m.is_expert_stack}
        self.ids = {layer: dev.tensor(model.n_expert_used, np.int32) for layer in self.n_expert}

        ops = self.seq = _Ops()
        if self.ids:
            ops.record(kp.OpTensorSyncDevice(list(self.ids.values())))
        for i, stage in enumerate(model.stages()):
            if i:
                ops.record(dev.compute_barrier())
            self._record_stage(stage, weights)
        self.logits = self.outputs[model.matrices[-1].name]
        ops.record(kp.OpTensorSyncLocal([self.logits]))

        info = backend.device_info
        self._period = info.timestamp_period if info.timestamps_supported else None
        # The kernels run between the ids upload (op 1, if any) and the logits
        # read-back (the last op): timestamps[first] .. timestamps[n - 1].
        n = len(ops.ops)
        self._kernel_span = (1 if self.ids else 0, n - 1)
        self.seq = dev.manager.sequence(0, n + 1) if self._period else dev.manager.sequence()
        for op in ops.ops:
            self.seq.record(op)
        self._ran = False

    def _input(self, n_vectors: int, k_pad: int):
        key = (n_vectors, k_pad)
        if key not in self.inputs:
            # Padding columns of F32/F16 rows get values too: only the time counts.
            values = np.random.default_rng(k_pad).uniform(-1, 1, n_vectors * k_pad).astype(np.float32)
            self.inputs[key] = self.device.upload(values)
        return self.inputs[key]

    def _record_stage(self, stage: list[Matrix], weights: dict[str, Weights]) -> None:
        dev, seq = self.device, self.seq
        ws = [weights[m.name] for m in stage]
        k_pad = ws[0].layout.k_padded
        assert all(w.layout.k_padded == k_pad for w in ws), "a stage's matrices share one input"
        n_vectors = self.model.n_expert_used if stage[0].per_expert_input else 1
        x = self._input(n_vectors, k_pad)
        xq = None
        planes = {self.configs[m.name].x_planes for m in stage if self.configs[m.name].path == "mmvq"}
        if planes:
            assert len(planes) == 1, "a stage's int8 matrices share one activation format"
            key = (n_vectors, k_pad, *planes)
            if key not in self.quantized:
                self.quantized[key] = dev.tensor(q8_1_words(*key), np.uint32)
            xq = self.quantized[key]
            quantize = QuantizeQ8_1(dev, x, xq, *key)
            quantize.record(seq)
            seq.record(dev.compute_barrier())
            self._ops.append(quantize)
        for m, w in zip(stage, ws):
            cfg = self.configs[m.name]
            n_slots = self.model.n_expert_used if m.is_expert_stack else 0
            y = self.outputs[m.name] = dev.tensor(max(n_slots, 1) * w.layout.rows)
            ids = self.ids[m.layer] if m.is_expert_stack else None
            op = MatVec(dev, w, cfg, xq if cfg.path == "mmvq" else x, y, ids=ids, n_slots=n_slots,
                        shared_x=not m.per_expert_input)
            op.record(seq)
            self._ops.append(op)

    def draw_ids(self) -> None:
        """New experts for every MoE layer: top-k distinct of n_expert, at random."""
        for layer, ids in self.ids.items():
            ids.data()[:] = self.rng.permutation(self.n_expert[layer])[: self.model.n_expert_used]

    def run(self) -> None:
        """One token: new expert ids, then the whole recorded step."""
        self.draw_ids()
        self.seq.eval()
        self._ran = True

    def kernel_seconds(self) -> float | None:
        """GPU time of the last `run()`'s kernels (GPU timestamps; the uploads
        of ids and the logits read-back not counted); None where the device
        has no timestamps, or before the first run."""
        if self._period is None or not self._ran:
            return None
        return timestamp_span(self.seq.get_timestamps(), self._period, *self._kernel_span)
