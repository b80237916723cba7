"""What one call costs when the kernel is negligible: the floor of a Kompute
submit + wait (a 64-byte copy), and `Backend.matvec` of a 256 x 256 Q4_0
matrix (a kernel of a few microseconds) on each path. On a GPU these are
fixed costs far above a small kernel's time (about 0.5 ms per submit through
Kompute on an H100), which is why an engine records a graph and submits it
once per token.

Each function returns the call to time; `seconds_per_call` times it
(vkq `report`), pytest-benchmark times the same calls in
bench/test_bench_batched.py.
"""
from __future__ import annotations

import statistics
from typing import Callable

import kp
import numpy as np

from ..blocks.synthetic import random_weights
from ..device.timing import WARM_SECONDS, wall_samples, warm_up

SMALL_SHAPE = (256, 256)
SMALL_TYPE = "Q4_0"


def submit_floor(backend) -> Callable[[], None]:
    """One Kompute submit + wait that moves 64 bytes: the least any call costs."""
    t = backend.device.tensor(16)
    seq = backend.device.manager.sequence().record(kp.OpTensorSyncDevice([t]))
    return seq.eval


def small_weights(backend):
    """The 256 x 256 Q4_0 matrix of `small_matvec`, uploaded."""
    from ..blocks.formats import get_format

    rows, k = SMALL_SHAPE
    return backend.upload(SMALL_TYPE, SMALL_SHAPE, random_weights(get_format(SMALL_TYPE), rows, k,
                                                                  np.random.default_rng(0)))


def small_matvec(backend, weights, path: str) -> Callable[[], np.ndarray]:
    """One Backend.matvec call of `weights` (small_weights) on `path`: x up, kernel, y back."""
    x = np.random.default_rng(1).uniform(-1, 1, weights.shape[1]).astype(np.float32)
    return lambda: backend.matvec(weights, x, path)


def seconds_per_call(call: Callable[[], object], calls: int) -> float:
    """The median wall time of `calls` calls, after WARM_SECONDS of them (clocks up, pipelines built)."""
    warm_up(call, WARM_SECONDS)
    return statistics.median(wall_samples(call, calls, warm=False))
