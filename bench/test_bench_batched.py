"""What a submit costs, and what the batched API (vkq.Graph) saves.

- per call (vkq.commands.call_cost, as `vkq report` measures it): Backend.matvec of
  a 256 x 256 Q4_0 matrix (a kernel of a few microseconds), against the
  floor of one Kompute submit + wait (a 64-byte copy) measured in the same run;
- 100 chained mat-vecs (a 4096-wide MLP stack, Q4_0, each layer's output
  the next one's input): one graph replay (one submit) against 100
  Backend.matvec calls, and against the GPU time of the replay's kernels
  (timestamps around its dispatches, Q8_1 quantizations included): the
  replay's wall time over that is what submitting costs.

`python -m pytest bench/test_bench_batched.py`; the ratio table at the end
relates every case to its group's baseline.
"""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from vkq.commands import call_cost


WIDTH, DEPTH, DISTINCT = 4096, 100, 10  # 10 distinct 4096 x 4096 Q4_0 matrices (94 MB) cycled
GROUP = f"{DEPTH} chained {WIDTH}x{WIDTH} Q4_0"


def stable_q4_0(rows: int, k: int, rng) -> np.ndarray:
    """Q4_0 weights whose mat-vec keeps x's scale: quants q - 8 uniform in
    -7..7 (zero mean), d = 1 / (std(q - 8) sqrt(K)), so 100 layers neither
    overflow nor vanish."""
    nblocks = rows * k // 32
    q = rng.integers(1, 16, (nblocks, 32), dtype=np.uint8)
    blocks = np.empty((nblocks, 18), np.uint8)
    blocks[:, :2] = np.full((nblocks, 1), 1 / (np.sqrt(56 / 3) * np.sqrt(k)), np.float16).view(np.uint8)
    blocks[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return blocks.reshape(rows, -1)


@pytest.fixture(scope="module")
def small(backend):
    return call_cost.small_weights(backend)


def test_submit_floor(benchmark, backend, record):
    """One Kompute submit + wait that moves 64 bytes: the least any call costs."""
    benchmark.group = "per call, 256x256 Q4_0"
    benchmark.pedantic(call_cost.submit_floor(backend), rounds=2000, iterations=1, warmup_rounds=50)
    record(benchmark, benchmark.group, "submit floor (64-byte copy)", 0, baseline=True)


@pytest.mark.parametrize("path", ["dmmv", "mmvq"])
def test_matvec_call(benchmark, backend, record, small, path):
    benchmark.group = "per call, 256x256 Q4_0"
    benchmark.pedantic(call_cost.small_matvec(backend, small, path), rounds=2000, iterations=1, warmup_rounds=50)
    record(benchmark, benchmark.group, f"Backend.matvec {path}", small.nbytes)


@pytest.fixture(scope="module")
def stack(backend):
    rng = np.random.default_rng(2)
    distinct = [backend.upload("Q4_0", (WIDTH, WIDTH), stable_q4_0(WIDTH, WIDTH, rng)) for _ in range(DISTINCT)]
    return [distinct[i % DISTINCT] for i in range(DEPTH)]


def record_chain(backend, stack, timestamps: bool):
    g = backend.graph(timestamps)
    x = g.input(backend.tensor(WIDTH))
    h = x
    for w in stack:
        h = g.matvec(w, h)
    g.output(h)
    x.write(np.random.default_rng(3).uniform(-1, 1, WIDTH).astype(np.float32))
    return g, h


@pytest.fixture(scope="module")
def chain(backend, stack):
    return record_chain(backend, stack, timestamps=False)


def test_chain_kernels(backend, record, stack, runs: int = 5):
    """The kernels' share: GPU timestamps around the dispatches of the same
    chain (first quantization to last mat-vec), median of `runs` replays.
    Measured in a replay, so the weights stream from memory as they do there
    (each matrix alone, replayed, would sit in the CPU's cache). A separate
    graph: Kompute writes a timestamp after every op, which itself costs
    time on lavapipe, so the wall-clock cases run without them."""
    if not backend.device_info.timestamps_supported:
        pytest.skip("this device has no GPU timestamps")
    g, _ = record_chain(backend, stack, timestamps=True)
    times = []
    for _ in range(runs + 1):
        g.run()
        times.append(g.kernel_seconds)
    record(None, GROUP, "kernels (GPU timestamps)", 0, baseline=True, seconds=statistics.median(times[1:]))
    g.destroy()


def test_chain_graph(benchmark, backend, record, stack, chain):
    g, out = chain
    benchmark.group = GROUP
    benchmark.pedantic(lambda: (g.run(), out.read()), rounds=5, iterations=1, warmup_rounds=1)
    assert np.isfinite(out.read()).all()
    record(benchmark, benchmark.group, "graph: one replay, one submit", sum(w.nbytes for w in stack))


def test_chain_calls(benchmark, backend, record, stack, chain):
    g, out = chain
    x0 = np.random.default_rng(3).uniform(-1, 1, WIDTH).astype(np.float32)
    cfgs = [cfg for _, cfg in g.matvecs]

    def calls():
        x = x0
        for w, cfg in zip(stack, cfgs):
            x = backend.matvec(w, x, config=cfg)
        return x

    benchmark.group = GROUP
    y = benchmark.pedantic(calls, rounds=5, iterations=1, warmup_rounds=1)
    g.run()
    assert np.array_equal(y, out.read())  # the same pipelines give the same bits
    record(benchmark, benchmark.group, f"{DEPTH} Backend.matvec calls", sum(w.nbytes for w in stack))
