"""How vkq's commands print on a terminal: one status line. (Their tables
are vkq.markdown's.)"""
from __future__ import annotations

import sys


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
