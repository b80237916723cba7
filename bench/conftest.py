"""Benchmarks (pytest-benchmark): `python -m pytest bench --benchmark-only`.

Every benchmark group holds a baseline measured in the same run (numpy
dequantize + mat-vec); at the end a table gives each case's speed as a ratio
to its group's baseline, and the weight bytes read per second.
"""
from __future__ import annotations

import pytest

import vkq

_RESULTS: dict[str, dict[str, tuple[float, float]]] = {}  # group -> name -> (mean s, bytes)


@pytest.fixture(scope="session")
def backend():
    return vkq.Backend()


@pytest.fixture
def record(request):
    """record(benchmark, group, name, nbytes): keep the mean for the ratio table."""

    def _record(benchmark, group: str, name: str, nbytes: int):
        _RESULTS.setdefault(group, {})[name] = (benchmark.stats.stats.mean, nbytes)

    return _record


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS:
        return
    tr = terminalreporter
    tr.section("vkq: speed relative to the numpy baseline of the same group")
    tr.write_line("| group | case | mean ms | weights GB/s | x baseline |")
    tr.write_line("|---|---|---:|---:|---:|")
    for group, cases in _RESULTS.items():
        base = cases.get("numpy")
        for name, (mean, nbytes) in cases.items():
            ratio = f"{base[0] / mean:.2f}x" if base else "-"
            tr.write_line(f"| {group} | {name} | {mean * 1e3:.2f} | {nbytes / mean / 1e9:.2f} | {ratio} |")
