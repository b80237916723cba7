"""How vkq's long commands show progress on stderr: on a terminal one status
line, rewritten, with an ETA; in a log a line per finished step. (Their
tables are vkq.markdown's.)"""
from __future__ import annotations

import sys
import time


class StatusLine:
    """One line on a terminal, rewritten in place; nothing where the stream is
    not a terminal (a log gets no carriage returns)."""

    def __init__(self, stream=sys.stderr, enabled: bool = True):
        self.stream = stream
        self.live = enabled and stream.isatty()

    def show(self, text: str) -> None:
        if self.live:
            self.stream.write(f"\r\033[K{text}")
            self.stream.flush()

    def clear(self) -> None:
        self.show("")


class Progress:
    """`total_units` of work: a terminal gets one line, rewritten, with an
    ETA (`step`); a terminal and a log both get a line per finished step
    (`finish`), so that a run whose output is not a terminal still says
    what it is doing. enabled False: nothing at all."""

    def __init__(self, total_units: int, enabled: bool = True, stream=None, label: str = "tune"):
        stream = sys.stderr if stream is None else stream  # (the one at the call: a test's capture)
        self.stream, self.enabled, self.label = stream, enabled, label
        self.line = StatusLine(stream, enabled)
        self.total, self.done_units, self.start = total_units, 0, time.monotonic()
        # Steps whose length is known in seconds rather than units (vkq bench's bandwidth probes): the
        # seconds they took, kept out of the rate per unit, and the seconds of those still to come.
        self.fixed_spent = self.fixed_left = 0.0

    def fixed(self, spent: float = 0.0, left: float | None = None) -> None:
        """A step of known length took `spent` seconds (not counted in the
        rate per unit); `left`: the seconds such steps still to come will
        take (replaces the last figure)."""
        self.fixed_spent += spent
        if left is not None:
            self.fixed_left = left

    def seconds_left(self) -> float | None:
        """The ETA in seconds (None before any unit is done)."""
        if not self.done_units:
            return None
        rate = max(time.monotonic() - self.start - self.fixed_spent, 0.0) / self.done_units
        return rate * (self.total - self.done_units) + self.fixed_left

    def eta(self) -> str:
        left = self.seconds_left()
        if left is None:
            return "ETA ?"
        return f"ETA {int(left // 60)}m{int(left % 60):02d}s"

    def step(self, text: str) -> None:
        self.line.show(f"{self.label} {self.done_units}/{self.total}, {self.eta()}: {text}")

    def note(self, line: str) -> None:
        """A line of its own, on a terminal and in a log: what a long step is
        about to spend its time on."""
        self.line.clear()
        if self.enabled:
            self.stream.write(f"{line}\n")
            self.stream.flush()

    def finish(self, units: int, line: str) -> None:
        self.done_units += units
        self.line.clear()
        if self.enabled:
            head, sep, rest = line.partition("\n")  # (a block of lines: the progress note on its first)
            left = self.done_units < self.total or self.fixed_left
            self.stream.write(f"{head} ({self.eta() if left else 'done'}){sep}{rest}\n")
            self.stream.flush()
