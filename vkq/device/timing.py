"""How vkq times GPU work: warm clocks, enough work per sample, interleaved candidates.

Pure logic, no Vulkan: every function takes the work to time as a callable
that runs it and returns the seconds it took (GPU timestamps where the device
has them, the wall clock otherwise), and a `clock` for wall-clock budgets, so
the unit tests drive it with a fake clock. `vkq tune`, `vkq bench` and the
bandwidth probe (vkq/commands/bench.py) all time through here.

Why each step (the traps measured on an H100, 2026-11-23: its clocks idle at
~345 MHz and reach 1980 MHz only under sustained load):
- GPU clocks idle low and ramp up only under sustained load: `warm_up` runs
  the work back to back for a while before anything is timed;
- a few short dispatches measure launch latency and clock state, not the
  kernel: `calibrate` repeats the work until one sample is tens of ms;
- the order of measurements drifts (clocks, other processes): `interleave`
  times candidates in rounds A B C, C B A, ... so a linear drift cancels;
- other work on the device or machine only ever slows a sample down (a
  preempted run, another process): `summarize` takes the fastest sample as
  the estimate and the median's distance from it as the spread, so a few
  slowed samples change neither.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Mapping

WARM_SECONDS = 0.3  # sustained work before timing: clocks ramp up within ~0.1 s on the H100
SAMPLE_SECONDS = 0.02  # GPU time per sample: tens of ms, far above launch and timer noise
REJECT = 0.25  # a sample this much slower than the median (relative) counts as disturbed
# Bytes one pass of timed work reads, at least: past any GPU's last-level
# cache (H100 L2 50 MB, RDNA3 up to 96 MB, MI300X 256 MB) and any CPU's L3.
ROTATION_BYTES = 256 << 20


@dataclass(frozen=True)
class Estimate:
    """Seconds per unit of work: the fastest of the kept samples, and their spread."""

    seconds: float
    spread: float  # (median - fastest) / fastest
    samples: tuple[float, ...] = field(repr=False)
    disturbed: int = 0  # samples more than REJECT slower than the median (reported, not used)


def summarize(samples: list[float]) -> Estimate:
    """The fastest sample, and how far the median lies above it."""
    if not samples:
        raise ValueError("no samples to summarize")
    low, med = min(samples), statistics.median(samples)
    spread = (med - low) / low if low > 0 else 0.0
    return Estimate(low, spread, tuple(samples), sum(s > (1 + REJECT) * med for s in samples))


def warm_up(run: Callable[[], float], seconds: float = WARM_SECONDS,
            clock: Callable[[], float] = time.perf_counter) -> int:
    """Run the work back to back for `seconds` of wall clock; returns how often.
    At least once (the first run also builds pipelines, touches memory)."""
    start, calls = clock(), 0
    while True:
        run()
        calls += 1
        if clock() - start >= seconds:
            return calls


def calibrate(run_once: Callable[[], float], target: float = SAMPLE_SECONDS, max_repeats: int = 4096) -> int:
    """How many back-to-back repeats of the work make one sample of about
    `target` seconds (its own timer), from one timed run of it."""
    t = run_once()
    if t <= 0:
        return max_repeats
    return max(1, min(max_repeats, math.ceil(target / t)))


def interleave(candidates: Mapping[Hashable, Callable[[], float]], rounds: int,
               prune: float | None = None) -> dict[Hashable, Estimate]:
    """Time every candidate `rounds` times, in rounds of alternating order
    (A B C, C B A, A B C, ...): a drift over the run weighs on all alike.
    Each callable returns the seconds of one sample of its work. `prune`:
    after the first round, a candidate slower than `prune` x the fastest is
    not timed again (a clear loser need not cost the time of a close race)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    keys = list(candidates)
    samples: dict[Hashable, list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys if r % 2 == 0 else reversed(keys):
            samples[k].append(candidates[k]())
        if r == 0 and prune is not None:
            fastest = min(v[0] for v in samples.values())
            keys = [k for k in keys if samples[k][0] <= prune * fastest]
    return {k: summarize(v) for k, v in samples.items()}


def faster(challenger: Estimate, incumbent: Estimate, margin: float = 0.02) -> bool:
    """Whether the challenger is clearly faster: by more than `margin` and
    by more than the noise (half the larger spread) of either measurement."""
    need = max(margin, 0.5 * max(challenger.spread, incumbent.spread))
    return challenger.seconds < incumbent.seconds * (1 - need)


def best(estimates: Mapping[Hashable, Estimate], incumbent: Hashable, margin: float = 0.02) -> Hashable:
    """The fastest candidate if it is clearly faster than the incumbent, else the incumbent."""
    fastest = min(estimates, key=lambda k: estimates[k].seconds)
    return fastest if fastest != incumbent and faster(estimates[fastest], estimates[incumbent], margin) else incumbent


def rotation(sizes: list[int], past: int = ROTATION_BYTES, max_copies: int | None = None) -> list[tuple[int, int]]:
    """One pass over enough copies of some buffers (`sizes` bytes each) that
    it reads at least `past` bytes (or `max_copies` copies, if fewer):
    [(buffer index, copy)], copy-major, so a buffer is read again only after
    every other copy has been (a cache smaller than `past` then holds none of
    it any more)."""
    total = sum(sizes)
    if total <= 0:
        raise ValueError("rotation over no bytes")
    copies = max(1, math.ceil(past / total))
    if max_copies is not None:
        copies = min(copies, max_copies)
    return [(i, c) for c in range(copies) for i in range(len(sizes))]


def timestamp_span(timestamps: list[int], period_ns: float, first: int = 0, last: int = -1) -> float:
    """Seconds between two GPU timestamps of a Kompute sequence made with
    timestamps (one latched at its start, then one after each recorded op:
    timestamps[i] is the end of op i, 1-based)."""
    return (timestamps[last] - timestamps[first]) * period_ns * 1e-9


def wall_samples(fn: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter,
                 warm: bool = True) -> list[float]:
    """Wall-clock seconds of `repeats` calls of fn, after one untimed warm-up call (unless not `warm`)."""
    if warm:
        fn()
    out = []
    for _ in range(repeats):
        t = clock()
        fn()
        out.append(clock() - t)
    return out
