"""vkq.device.timing against a simulated device: a fake clock, clocks that ramp up,
a last-level cache, drift and preemption spikes (CI has no GPU)."""
from __future__ import annotations

from collections import OrderedDict

import pytest

from vkq.device import timing


class FakeGPU:
    """Work whose time depends on clock state: starts at idle clocks (4x
    slower) and reaches full speed after `ramp` seconds of sustained work.
    `now` is the fake wall clock; every run advances it by its own time."""

    def __init__(self, base: float = 0.001, ramp: float = 0.1, idle_factor: float = 4.0):
        self.now, self.busy = 0.0, 0.0
        self.base, self.ramp, self.idle_factor = base, ramp, idle_factor

    def clock(self) -> float:
        return self.now

    def run(self, work: float = 1.0) -> float:
        factor = self.idle_factor if self.busy < self.ramp else 1.0
        t = self.base * work * factor
        self.busy += t
        self.now += t
        return t


def test_warm_up_reaches_full_clocks():
    gpu = FakeGPU()
    assert gpu.run() == pytest.approx(0.004)  # cold
    calls = timing.warm_up(gpu.run, 0.3, gpu.clock)
    assert calls > 10 and gpu.now >= 0.3
    assert gpu.run() == pytest.approx(0.001)  # warm: the real speed


def test_warm_up_runs_at_least_once():
    gpu = FakeGPU()
    assert timing.warm_up(gpu.run, 0.0, gpu.clock) == 1


def test_calibrate_makes_samples_of_the_target_length():
    gpu = FakeGPU(ramp=0)
    n = timing.calibrate(gpu.run, target=0.02)
    assert n == 20
    assert timing.calibrate(lambda: 0.5, target=0.02) == 1
    assert timing.calibrate(lambda: 0.0, target=0.02, max_repeats=64) == 64


def test_summarize_ignores_a_preempted_sample():
    est = timing.summarize([1.00, 1.01, 0.99, 3.0, 1.00])
    assert est.seconds == pytest.approx(0.99)
    assert est.disturbed == 1
    assert est.spread == pytest.approx(0.01 / 0.99)
    with pytest.raises(ValueError):
        timing.summarize([])


def test_summarize_reports_scatter_as_spread():
    est = timing.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert est.seconds == pytest.approx(1.0) and est.spread == pytest.approx(2.0)


def test_interleave_order_alternates():
    order = []
    cands = {name: (lambda name=name: order.append(name) or 1.0) for name in "ABC"}
    timing.interleave(cands, rounds=4)
    assert "".join(order) == "ABCCBAABCCBA"
    with pytest.raises(ValueError):
        timing.interleave(cands, rounds=0)


def test_interleave_prunes_clear_losers():
    calls = {"fast": 0, "slow": 0, "close": 0}
    times = {"fast": 1.0, "slow": 2.0, "close": 1.1}

    def work(k):
        calls[k] += 1
        return times[k]

    est = timing.interleave({k: (lambda k=k: work(k)) for k in times}, rounds=4, prune=1.5)
    assert calls == {"fast": 4, "slow": 1, "close": 4}
    assert est["slow"].seconds == 2.0 and len(est["slow"].samples) == 1


def test_interleaving_cancels_drift():
    """Two equal candidates on a device slowing down linearly (thermal,
    another process): back to back, the first looks 30% faster; interleaved
    A B B A, they come out equal and neither replaces the other."""
    t = [0.0]

    def work():  # 1 ms, 1% slower per call made so far
        t[0] += 1
        return 0.001 * (1 + 0.01 * t[0])

    seq = {k: timing.summarize([work() for _ in range(30)]) for k in "AB"}
    assert seq["B"].seconds > 1.25 * seq["A"].seconds
    t[0] = 0.0
    inter = timing.interleave({"A": work, "B": work}, rounds=30)
    assert inter["B"].seconds == pytest.approx(inter["A"].seconds, rel=0.01)
    assert timing.best(inter, "A") == "A" and timing.best(inter, "B") == "B"


def test_noise_from_load_does_not_decide():
    """Other processes slow a quarter of the samples by up to 3x: the fastest
    sample of each candidate still ranks them right; when most samples are
    slowed, the spread grows and no change is made on such evidence."""
    import random

    rng = random.Random(0)

    def load(p):
        return 1 + (2 * rng.random() if rng.random() < p else 0)

    est = timing.interleave({"a": lambda: 1.00 * load(0.25), "b": lambda: 0.90 * load(0.25)}, rounds=8)
    assert est["a"].seconds == pytest.approx(1.0) and est["b"].seconds == pytest.approx(0.9)
    assert timing.best(est, "a") == "b"
    est = timing.interleave({"a": lambda: 1.00 * load(0.9), "b": lambda: 0.98 * load(0.9)}, rounds=8)
    assert est["a"].spread > 0.1 and timing.best(est, "a") == "a"


def test_best_needs_a_clear_win():
    est = lambda m, spread=0.0: timing.Estimate(m, spread, (m,))  # noqa: E731
    assert timing.best({"a": est(1.0), "b": est(0.99)}, "a") == "a"  # within the margin
    assert timing.best({"a": est(1.0), "b": est(0.90)}, "a") == "b"
    assert timing.best({"a": est(1.0, 0.3), "b": est(0.90, 0.3)}, "a") == "a"  # within the noise
    assert timing.best({"a": est(1.0), "b": est(0.90), "c": est(0.80)}, "a") == "c"


class CachedMemory:
    """An LRU last-level cache in front of slow memory: a buffer read from the
    cache costs 10x less than one read from memory."""

    def __init__(self, cache_bytes: int):
        self.cache_bytes, self.lines = cache_bytes, OrderedDict()

    def read(self, key, nbytes: int) -> float:
        hit = key in self.lines
        self.lines.pop(key, None)
        self.lines[key] = nbytes
        while sum(self.lines.values()) > self.cache_bytes:
            self.lines.popitem(last=False)
        return nbytes * (1e-12 if hit else 1e-11)


@pytest.mark.parametrize("cache_mb", [32, 50, 96, 128])
def test_rotation_defeats_the_cache(cache_mb):
    """One 33 MB matrix repeated runs from a 50 MB cache at 10x the memory's
    speed (the H100 trap); rotating over copies past ROTATION_BYTES reads
    memory every time, whatever the cache below that size."""
    sizes = [33 << 20, 9 << 20]
    mem = CachedMemory(cache_mb << 20)
    order = timing.rotation(sizes)
    assert sum(sizes[i] for i, _ in order) >= timing.ROTATION_BYTES
    assert len(order) == len(set(order))  # every (buffer, copy) once per pass
    for _ in range(2):  # the second pass finds nothing left in the cache
        times = [mem.read(item, sizes[item[0]]) for item in order]
    assert times == [sizes[i] * 1e-11 for i, _ in order]
    # Without rotation the same matrix is a cache hit from the second run on
    # wherever it fits in the cache.
    mem = CachedMemory(cache_mb << 20)
    first, second = mem.read("w", sizes[0]), mem.read("w", sizes[0])
    assert (second < first / 5) == (sizes[0] <= cache_mb << 20)


def test_rotation_of_a_big_buffer_is_one_copy():
    assert timing.rotation([300 << 20]) == [(0, 0)]
    assert len(timing.rotation([1 << 20], max_copies=8)) == 8
    with pytest.raises(ValueError):
        timing.rotation([0])


def test_wall_samples_skip_the_first_call():
    gpu = FakeGPU(ramp=0.0)
    first = []
    samples = timing.wall_samples(lambda: first.append(1) or gpu.run(), 3, gpu.clock)
    assert len(first) == 4 and samples == [pytest.approx(0.001)] * 3
