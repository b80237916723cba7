"""Benchmarks (pytest-benchmark): `python -m pytest bench --benchmark-only`.

Every benchmark group holds a baseline measured in the same run (numpy
dequantize + mat-vec, or the case recorded with baseline=True); at the end
a table gives each case's speed as a ratio to its group's baseline, and the
weight bytes read per second.
"""
from __future__ import annotations

import pytest

import vkq

_RESULTS: dict[str, dict[str, tuple[float, float]]] = {}  # group -> name -> (median s, bytes)
_BASELINES: dict[str, str] = {}  # group -> the name of its baseline case


@pytest.fixture(scope="session")
def backend():
    return vkq.Backend()


@pytest.fixture
def record(request):
    """record(benchmark, group, name, nbytes): keep the median for the ratio table
    (`seconds=` instead of a benchmark: a figure measured another way, e.g. by
    GPU timestamps)."""

    def _record(benchmark, group: str, name: str, nbytes: int, *, baseline: bool = False,
                seconds: float | None = None):
        _RESULTS.setdefault(group, {})[name] = (benchmark.stats.stats.median if seconds is None else seconds, nbytes)
        if baseline:
            _BASELINES[group] = name

    return _record


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS:
        return
    tr = terminalreporter
    tr.section("vkq: speed relative to the numpy baseline of the same group")
    tr.write_line("| group | case | median ms | weights GB/s | time / baseline's |")
    tr.write_line("|---|---|---:|---:|---:|")
    for group, cases in _RESULTS.items():
        base = cases.get(_BASELINES.get(group, "numpy"))
        for name, (mean, nbytes) in cases.items():
            ratio = f"{mean / base[0]:.2f}" if base else "-"
            gbps = f"{nbytes / mean / 1e9:.2f}" if nbytes else "-"
            tr.write_line(f"| {group} | {name} | {mean * 1e3:.3f} | {gbps} | {ratio} |")
