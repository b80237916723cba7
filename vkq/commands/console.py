"""How vkq's commands print: markdown tables with aligned columns, and one
status line on a terminal."""
from __future__ import annotations

import sys


def markdown(header: list[str], cells: list[list[str]], right: set[str] = frozenset()) -> str:
    """A markdown table padded to aligned columns; the columns named in
    `right` right-aligned (numbers, like llama-bench)."""
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]

    def line(vals: list[str]) -> str:
        return "| " + " | ".join(v.rjust(w) if h in right else v.ljust(w)
                                 for v, h, w in zip(vals, header, widths)) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if h in right else "-" * w for h, w in zip(header, widths)) + " |"
    return "\n".join([line(header), rule] + [line(c) for c in cells])


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
