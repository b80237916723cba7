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
from .vector_ops.common import Vectors, _Op, _size, spreads

RING_SLOTS = REPEAT_LAST_N_MAX  # shaders/sample.comp's RING
SAMPLE_CAP = TOP_K_MAX  # shaders/sample.comp's CAP
PARAM_WORDS = 10  # Sampling.params's words
SAMPLE_WG_CPU = 64  # invocations per workgroup on a CPU driver (its barriers cost more than its lanes give)
SAMPLE_WG_GPU = 256
# Values per workgroup of a GPU's first pass: a 49k vocabulary in 24 parts,
# each 8 loads per invocation and pass; the second pass's 24 * k candidates
# (k = 40: 4 loads per invocation and pass).
SAMPLE_SPAN = 2048


def ring_of(tokens, position: int, first: int = 0) -> np.ndarray:
    """The ring a sampling step at `position` reads: the tokens of the
    context before it (tokens[i] at position first + i), the last
    RING_SLOTS - 1 of them each in slot position % RING_SLOTS; -1 where
    there is none."""
    ring = np.full(RING_SLOTS, -1, np.int32)
    q = np.arange(max(first, position - RING_SLOTS + 1), position)
    ring[q % RING_SLOTS] = np.asarray(tokens, np.int32)[q - first]
    return ring


def sample_parts(device, n_vocab: int) -> int:
    """Ranges a vector's first pass is split into: one per SAMPLE_SPAN
    values where the device spreads (a GPU), else the whole vector in one
    workgroup."""
    return -(-n_vocab // SAMPLE_SPAN) if spreads(device) else 1


def sample_depth(n: int, wg: int, k: int) -> int:
    """Serial depth (Launch) of a workgroup over n entries: six passes
    (four radix passes, the candidates, the equal keys' ranks), the sort's
    stages and the one-invocation chain over k candidates."""
    return 6 * -(-n // wg) + 55 + 3 * k


class Sample(_Op):
    """out[v] = the token the sampler chain draws from vector v of logits
    (n vectors), at the position and after the token at index tok_off + v
    of `positions` and `tokens`; params: a uint32 tensor of PARAM_WORDS
    (Sampling.params); ring: an int32 tensor of RING_SLOTS recent tokens,
    which with write_ring (one vector) gets the vector's token. parts:
    ranges each vector's first pass is split into over as many workgroups,
    then a second dispatch draws from their candidates (default
    sample_parts; the same token)."""

    def __init__(self, device, logits: Vectors, tokens, positions, params, ring, out, n: int = 1, tok_off: int = 0,
                 write_ring: bool = True, parts: int | None = None):
        super().__init__(device)
        logits.check(n, "Sample logits")
        for t, size, what in ((params, PARAM_WORDS, "params"), (ring, RING_SLOTS, "ring"), (out, n, "out"),
                              (tokens, tok_off + n, "tokens"), (positions, tok_off + n, "positions")):
            if _size(t) < size:
                raise ValueError(f"Sample: {what} holds {_size(t)} values; {size} needed")
        if write_ring and n != 1:
            raise ValueError("Sample: write_ring is a decode step's, one vector")
        if parts is None:
            parts = sample_parts(device, logits.length)
        if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= min(logits.length, 4096):
            raise ValueError(f"Sample: {parts!r} parts; 1 to {min(logits.length, 4096)}")
        self.parts = parts
        wg = SAMPLE_WG_GPU if spreads(device) else SAMPLE_WG_CPU
        wg = min(wg, device.caps.max_workgroup_invocations)
        self.reads = (logits.tensor, tokens, positions, params, ring)
        self.writes = (ring, out)
        push = [logits.length, logits.offset, logits.step, tok_off, int(write_ring), parts]
        # ((value bits, id) of each part's candidates, SAMPLE_CAP per part and vector: only this op's)
        scratch = device.upload(np.zeros(2 * SAMPLE_CAP * parts * n if parts > 1 else 2, np.uint32))
        tensors = [logits.tensor.kp, tokens.kp, positions.kp, params.kp, ring.kp, out.kp, scratch]
        variant, k = VectorOpVariant("sample"), 40  # (the depths with llama.cpp's default top-k)
        if parts == 1:
            self._dispatch(tensors, variant, (n, 1, 1), [wg, 0], push, sample_depth(logits.length, wg, k))
        else:  # (_Op.record puts a barrier between the two)
            self._dispatch(tensors, variant, (parts, n, 1), [wg, 1], push,
                           sample_depth(-(-logits.length // parts), wg, k))
            self._dispatch(tensors, variant, (n, 1, 1), [wg, 2], push, sample_depth(parts * k, wg, k))
