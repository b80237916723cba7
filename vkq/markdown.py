"""Markdown tables with aligned columns: how vkq prints a table, from the
llama step's profile up to the commands' reports. No vkq imports."""
from __future__ import annotations


def markdown(header: list[str], cells: list[list[str]], right: set[str] = frozenset()) -> str:
    """A markdown table padded to aligned columns; the columns named in
    `right` right-aligned (numbers, like llama-bench)."""
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]

    def line(vals: list[str]) -> str:
        return "| " + " | ".join(v.rjust(w) if h in right else v.ljust(w)
                                 for v, h, w in zip(vals, header, widths)) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if h in right else "-" * w for h, w in zip(header, widths)) + " |"
    return "\n".join([line(header), rule] + [line(c) for c in cells])
