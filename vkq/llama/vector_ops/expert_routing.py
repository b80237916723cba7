"""ExpertRouting: a mixture-of-experts router's top-k (on the logits) and
softmax weights (the weighted sum of the selected experts' outputs is the
residual of the RMSNorm after them: rms_norm.WeightedSlots)."""
from __future__ import annotations

import numpy as np

from ..config import MAX_EXPERTS, MAX_EXPERTS_USED
from .common import Vectors, _ceil, _groups, _Op, reducing_variant

def expert_routing_depth(n_expert: int, wg: int) -> int:
    """Serial depth (Launch) of shaders/expert_routing.comp: its loop over
    the logits (the top-k's loops read them from shared memory)."""
    return _ceil(n_expert, wg)


class ExpertRouting(_Op):
    """A mixture-of-experts router for n vectors of router logits: the
    n_used experts of the largest logits (descending; equal: lower index
    first; NaN as -inf), their weights the softmax probabilities over the
    chosen ones' sum: exactly the experts the host's `route` chooses
    (vkq.llama.host; why the logits: shaders/expert_routing.comp). Writes ids
    (int32) and weights (float32), n_used per vector, into one vector of each
    tensor (the layout a MUL_MAT_ID's ids take). Declares its ids in [0, n_expert) (`bounded_ids`):
    the shader keeps them so, whatever the logits."""

    def __init__(self, device, logits: Vectors, ids, weights, n_used: int, n: int = 1):
        super().__init__(device)
        n_expert = logits.length
        if not 1 <= n_expert <= MAX_EXPERTS:
            raise ValueError(f"ExpertRouting: {n_expert} experts; 1 to {MAX_EXPERTS}")
        if not 1 <= n_used <= min(n_expert, MAX_EXPERTS_USED):
            raise ValueError(f"ExpertRouting: {n_used} used experts; 1 to {min(n_expert, MAX_EXPERTS_USED)} "
                             f"of {n_expert}")
        logits.check(n, "ExpertRouting logits")
        for t, dtype, what in ((ids, np.int32, "ids"), (weights, np.float32, "weights")):
            if t.dtype != dtype or t.n != 1 or t.length != n * n_used:
                raise ValueError(f"ExpertRouting {what}: one {np.dtype(dtype).name} vector of {n * n_used} "
                                 f"({n} x {n_used}), got {t!r}")
        self.reads, self.writes = (logits.tensor,), (ids, weights)
        self.bounded_ids = ((ids, n_expert),)
        variant, wg = reducing_variant(device, "expert_routing")
        push = [n_expert, n_used, logits.offset, logits.step]
        self._dispatch([logits.tensor.kp, ids.kp, weights.kp], variant, (_groups(n, 1), 1, 1), [wg], push,
                       expert_routing_depth(n_expert, wg))
