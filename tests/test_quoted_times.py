"""Every time the documentation and the command line's help quote (how long
a command, a build or a step took) is a measurement's: the same words stand
in docs/measurements.md, with its date, device and command (or, for the
test suite's and the build's times, in docs/testing.md's table). A figure
quoted from memory, or left behind when the thing it timed changed, fails
here until it is measured again or removed. Durations that are settings,
not measurements, are listed below with what they are."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")
                                 if p.name not in ("measurements.md", "testing.md"))
MEASURED = ("docs/measurements.md", "docs/testing.md")
# A duration: "82 s", "1.5-3 min", "42 minutes", "3m08s" (not "ms": kernel times are the tables' own).
DURATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?\s?(?:s|seconds?|minutes?|min|hours?)|\d+m\d+s)"
                      r"(?![\w])")
# Durations that are settings or limits, not measurements: where each is quoted, and what it is.
SETTINGS = {
    ("docs/cli.md", "20 minutes"): "the time vkq report gives ggml's run before stopping it",
    ("docs/cli.md", "0.3 s"): "the warm-up before timed runs (vkq.device.timing.WARM_SECONDS)",
    ("docs/gpu-campaign.md", "10 minutes"): "a command's limit on the lent GPU machine",
    ("docs/gpu-campaign.md", "540 s"): "the timeout the campaign script gives itself under that limit",
    ("docs/gpu-campaign.md", "150 s"): "the quick run's limit for its tests, and the time its plan gives them",
}


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _help_text() -> str:
    from vkq.commands.cli import build_parser

    parser = build_parser()
    parts = []
    for sub in parser.subcommands.values():
        parts += [sub.description or ""] + [a.help or "" for a in sub._actions]
    return _flat(" ".join(parts))


def quoted_times() -> list[tuple[str, str, str]]:
    """(source, duration, the words around it) of every duration quoted."""
    texts = {src: _flat((ROOT / src).read_text()) for src in SOURCES}
    texts["cli help"] = _help_text()
    return [(src, m.group(1), text[max(0, m.start() - 60):m.end() + 20])
            for src, text in texts.items() for m in DURATION.finditer(text)]


def test_every_quoted_time_is_a_measurement():
    measured = " ".join(_flat((ROOT / path).read_text()) for path in MEASURED)
    loose = [(src, q, around) for src, q, around in quoted_times()
             if (src, q) not in SETTINGS and q not in measured]
    assert not loose, "quoted times found in neither " + " nor ".join(MEASURED) + ":\n" + "\n".join(
        f"  {src}: {q!r} in ...{around}..." for src, q, around in loose)


def test_the_settings_listed_are_still_quoted():
    """A setting listed above that no text quotes any more goes from the list."""
    quoted = {(src, q) for src, q, _ in quoted_times()}
    assert set(SETTINGS) <= quoted, set(SETTINGS) - quoted


@pytest.mark.parametrize("text, found", [
    ("took 3m08s in all", ["3m08s"]), ("(82 s on a quiet machine, 3 min under load)", ["82 s", "3 min"]),
    ("1.5-3 min on lavapipe", ["1.5-3 min"]), ("7.2 ms of kernels, 42 minutes", ["42 minutes"]),
    ("Q4_0 58 s, 2 x 16 tokens", ["58 s"]),
])
def test_durations_are_found(text, found):
    assert [m.group(1) for m in DURATION.finditer(text)] == found
