"""Sample: the device's sampler (shaders/sample.comp), the op after the
output head that replaces greedy's argmax when a generation samples
(vkq.llama.sampling says the chain; its numpy sampler is this op's
reference).

Its settings come from a small tensor the host writes (Sampling.params),
so one recorded step serves every setting; the repeat penalty's window
from a ring of the context's recent tokens (slot position % RING_SLOTS),
which the host fills before a submit and each sampling step adds its own
token to, so that the steps of one submit (greedy's steps_per_submit
chains) see the tokens the ones before them chose.
"""
from __future__ import annotations

import numpy as np

from ..device.shader_variants import VectorOpVariant
from .sampling import REPEAT_LAST_N_MAX, TOP_K_MAX
from .vector_ops import Vectors, _Op, _size, spreads

RING_SLOTS = REPEAT_LAST_N_MAX  # shaders/sample.comp's RING
SAMPLE_CAP = TOP_K_MAX  # shaders/sample.comp's CAP
PARAM_WORDS = 10  # Sampling.params's words
SAMPLE_WG_CPU = 64  # invocations per workgroup on a CPU driver (its barriers cost more than its lanes give)
SAMPLE_WG_GPU = 256


def ring_of(tokens, position: int) -> np.ndarray:
    """The ring a sampling step at `position` reads: the tokens of the
    context (tokens[q] at position q) before it, each in slot q % RING_SLOTS;
    -1 where there is none."""
    ring = np.full(RING_SLOTS, -1, np.int32)
    for q in range(max(0, position - RING_SLOTS + 1), position):
        ring[q % RING_SLOTS] = tokens[q]
    return ring


def sample_depth(n_vocab: int, wg: int) -> int:
    """Serial depth (Launch) of one workgroup: six passes over the
    vocabulary (four radix passes, the candidates, the window's lookups
    aside), the sort's stages and the one-invocation chain over the
    candidates."""
    return 6 * -(-n_vocab // wg) + 55 + 3 * SAMPLE_CAP


class Sample(_Op):
    """out[v] = the token the sampler chain draws from vector v of logits
    (n vectors), at the position and after the token at index tok_off + v
    of `positions` and `tokens`; params: a uint32 tensor of PARAM_WORDS
    (Sampling.params); ring: an int32 tensor of RING_SLOTS recent tokens,
    which with write_ring (one vector) gets the vector's token."""

    def __init__(self, device, logits: Vectors, tokens, positions, params, ring, out, n: int = 1, tok_off: int = 0,
                 write_ring: bool = True):
        super().__init__(device)
        logits.check(n, "Sample logits")
        for t, size, what in ((params, PARAM_WORDS, "params"), (ring, RING_SLOTS, "ring"), (out, n, "out"),
                              (tokens, tok_off + n, "tokens"), (positions, tok_off + n, "positions")):
            if _size(t) < size:
                raise ValueError(f"Sample: {what} holds {_size(t)} values; {size} needed")
        if write_ring and n != 1:
            raise ValueError("Sample: write_ring is a decode step's, one vector")
        wg = SAMPLE_WG_GPU if spreads(device) else SAMPLE_WG_CPU
        wg = min(wg, device.caps.max_workgroup_invocations)
        self.reads = (logits.tensor, tokens, positions, params, ring)
        self.writes = (ring, out)
        push = [logits.length, logits.offset, logits.step, tok_off, int(write_ring)]
        tensors = [logits.tensor.kp, tokens.kp, positions.kp, params.kp, ring.kp, out.kp]
        self._dispatch(tensors, VectorOpVariant("sample"), (n, 1, 1), [wg], push, sample_depth(logits.length, wg))
